#!/usr/bin/env bash
# check_trainer.sh ok|lost N WEFTRUN-ARGS... -- TRAINER TRAINER-ARGS...
# Runs the example trainer under weftrun (the arguments after the first two as given) and
# checks how it ended; the exit status of a trainer run alone does not say whether it
# took the path under test.
#   ok    weftrun exits 0, the survivors restored from the snapshots ("restored step"), and
#         the state after the run is bitwise that of a run without failures.
#   lost  weftrun exits 86 (WEFT_EXIT_JOB_FAILED: the members said the job failed), the
#         trainer named the part of the state whose every copy died, N members said that
#         the training state is lost (every survivor stops, at once; "N+": at least N,
#         where replacements admitted meanwhile say so too), weftrun replaced none of
#         them, and nobody finished the run.
set -u
want=$1 n=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$SECONDS
"$@" >"$out" 2>&1
rc=$?
cat "$out"
said_lost=$(grep -c "training state lost" "$out")
echo "check_trainer: weftrun exit $rc after $((SECONDS - start)) s, $said_lost member(s) said the" \
     "state is lost"
case $want in
    ok)
        [[ $rc -eq 0 ]] && grep -q "^step [0-9]*: restored step" "$out" &&
            grep -q "^reference: w and momentum bitwise equal" "$out"
        ;;
    lost)
        if [[ $n == *+ ]]; then
            [[ $said_lost -ge ${n%+} ]]
        else
            [[ $said_lost -eq $n ]]
        fi && [[ $rc -eq 86 ]] &&
            grep -q "had every copy on members that are gone" "$out" &&
            ! grep -q "exited with status 86; started rank" "$out" && ! grep -q "^done:" "$out"
        ;;
    *)
        echo "check_trainer: want ok or lost, not $want"
        false
        ;;
esac || { echo "check_trainer: the run did not end as '$want'"; exit 1; }
