#!/bin/sh
# weft-perf's options, without ranks: option errors exit 2 with a message that names the
# option, --help and --version exit 0. Options are parsed before any weft call, so no
# weftrun is needed.
#   options.sh WEFT_PERF VERSION
perf=$1 version=$2
failures=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

fail() {
    echo "FAILED: weft-perf $1"
    sed 's/^/  stdout: /' "$out"
    sed 's/^/  stderr: /' "$err"
    failures=$((failures + 1))
}

# expect STATUS TEXT ARGS...: the exit status, and TEXT in stderr (status 2) or stdout.
expect() {
    want=$1 text=$2
    shift 2
    "$perf" "$@" >"$out" 2>"$err"
    rc=$?
    where=$out
    [ "$want" = 2 ] && where=$err
    if [ "$rc" != "$want" ]; then
        fail "$* exited $rc, expected $want"
    elif ! grep -qF -- "$text" "$where"; then
        fail "$* did not print '$text'"
    fi
}

expect 0 "weft-perf $version" --version
expect 0 "weft-perf $version" -V
expect 0 "weft-perf $version" allreduce --version
expect 0 "subcommands:" --help
expect 0 "--minbytes" allreduce --help
expect 0 "--no-rebuild" group --help
expect 0 "ssd_write_gbs" snapshot --help
expect 2 "usage: weft-perf"
expect 2 "unknown subcommand 'nosuch'" nosuch
expect 2 "option '--bogus' is unknown" --bogus
expect 2 "option '-x' is unknown" -x
expect 2 "option '-x' is unknown" allreduce -x
expect 2 "option '--bogus' is unknown" allreduce --bogus
expect 2 "option '--bogus' is unknown" sendrecv --bogus --help
expect 2 "option '-n' needs a value" allreduce -n
expect 2 "option '--iters' needs a value" allreduce --iters
expect 2 "option '--json' takes no value" allreduce --json=1
expect 2 "option '--no-rebuild' takes no value" group --no-rebuild=1
expect 2 "option '--w' is ambiguous" sendrecv --w 3
expect 2 "bad value 'abc' for --iters" allreduce -n abc
expect 2 "bad value 'abc' for --iters" allreduce --iters=abc
expect 2 "bad value '0' for --window" sendrecv -W 0
expect 2 "bad value '2' for --check" allreduce -c 2
expect 2 "bad value 'f8' for --datatype" allreduce -d f8
expect 2 "bad value 'avg' for --op" allreduce -o avg
expect 2 "bad value '12Q' for --minbytes" allreduce -b 12Q
expect 2 "bad value 'x' for --settle" allreduce --settle x
expect 2 "bad value 'some' for --bind" broadcast --bind some
expect 2 "bad value '0' for --tokens" vocab --tokens 0
expect 2 "bad value 'alg1,alg3' for --algos" vocab --algos alg1,alg3
expect 2 "bad value '100K' for --state-bytes" snapshot --state-bytes 100K
expect 2 "bad value '2G' for --state-bytes" snapshot --state-bytes 2G
expect 2 "bad value 'soon' for --step-ms" snapshot --step-ms soon
expect 2 "unexpected argument 'stray'" allreduce -n 3 stray
expect 2 "-b 1048576 is larger than -e 8" allreduce -b 1M -e 8
expect 2 "-f must be at least 2" allreduce -f 1
expect 2 "Try 'weft-perf allreduce --help'" allreduce -x
# Values that parse but make no sense.
expect 2 "-n 0: at least 1 timed iteration is needed" allreduce -n 0
expect 2 "-n 0: at least 1 timed iteration is needed" migrate -n 0
expect 2 "-n 0: at least 1 timed iteration is needed" group -n 0
expect 2 "-b 0: the smallest message must be at least 1 byte" allreduce -b 0
expect 2 "-b 0: the smallest message must be at least 1 byte" sendrecv -b 0
expect 2 "-e 0: the largest message must be at least 1 byte" alltoall -e 0
expect 2 "-b 2 is smaller than one float (4 bytes)" allreduce -b 2
expect 2 "-b 4 is smaller than one double (8 bytes)" broadcast -b 4 -d double
expect 2 "bad value '-1' for --iters" allreduce -n -1
expect 2 "bad value '-2' for --root" broadcast -r -2
expect 2 "bad value '0' for --stepfactor" allreduce -f 0
# Options a subcommand does not use are refused as such, and left out of its --help.
expect 2 "option '-o' (--op) is not used by sendrecv" sendrecv -o max
expect 2 "option '-W' (--window) is not used by allreduce" allreduce -W 4
expect 2 "option '-r' (--root) is not used by allreduce" allreduce --root 1
expect 2 "option '--inplace' is not used by alltoall" alltoall --inplace
expect 2 "option '--reuse' is not used by sendrecv" sendrecv --reuse
expect 2 "option '-b' (--minbytes) is not used by group" group -b 8
expect 2 "option '-c' (--check) is not used by migrate" migrate -c 0
expect 2 "option '-d' (--datatype) is not used by snapshot" snapshot -d f32
# helpful SUBCOMMAND TEXT...: each TEXT is in its --help; lacks SUBCOMMAND TEXT...: none is.
helpful() {
    sub=$1
    shift
    "$perf" "$sub" --help >"$out" 2>"$err" || fail "$sub --help exited $?"
    for t in "$@"; do grep -qF -- "$t" "$out" || fail "$sub --help does not list '$t'"; done
}
lacks() {
    sub=$1
    shift
    "$perf" "$sub" --help >"$out" 2>"$err" || fail "$sub --help exited $?"
    for t in "$@"; do ! grep -qF -- "$t" "$out" || fail "$sub --help lists '$t'"; done
}
for coll in allreduce reduce_scatter allgather broadcast alltoall; do
    helpful $coll --minbytes --iters --warmup_iters --check --datatype --reuse --json --version
    lacks $coll --window
done
helpful allreduce --op --inplace
lacks allreduce --root
helpful broadcast --root
lacks broadcast --op --inplace
lacks alltoall --op --inplace --root
helpful sendrecv --minbytes --iters --window --check --json
lacks sendrecv --datatype --op --root --inplace --reuse
helpful migrate --iters "(default 5)" --warmup_iters --json --scenario
lacks migrate --minbytes --check --datatype --window --reuse
helpful group --iters --json --victims
lacks group --minbytes --warmup_iters --check --datatype --reuse
helpful vocab --iters "(default 3)" --check --tokens
lacks vocab --minbytes --datatype --reuse
helpful snapshot --iters --warmup_iters --state-bytes
lacks snapshot --minbytes --check --reuse
# The accepted spellings of values: separate, glued, after '=', and -c's optional one.
expect 0 "--minbytes" allreduce -n 3 -n3 -n=3 --iters=3 --iters 3 -c -c 0 -c1 --check=0 --help

if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "PASSED"
