#!/usr/bin/env bash
# launcher_private.sh WEFTRUN
# weftrun holds the job token (the launcher's secret, from which every member's secret
# derives) and its ranks run as the same user. A rank must not read weftrun's memory or
# environment (/proc/PID/mem, /proc/PID/environ, ptrace), or it could act as the launcher
# or as any member: weftrun makes itself non-dumpable. Root may read any process, so as
# root the test runs weftrun as nobody (setpriv), and skips (77) where it cannot. The
# control: a process the rank starts itself stays readable to it.
set -u
weftrun=$(readlink -f "$1")
as=()
if [ "$(id -u)" = 0 ]; then
    command -v setpriv >/dev/null || { echo "launcher_private: no setpriv: skipped"; exit 77; }
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    "${as[@]}" test -x "$weftrun" ||
        { echo "launcher_private: nobody cannot run $weftrun: skipped"; exit 77; }
fi
out=$(cd /tmp && TMPDIR=/tmp "${as[@]}" "$weftrun" -n 1 --timeout 60 -- sh -c '
p=$PPID
echo "parent: $(cat /proc/$p/comm)"
if cat /proc/$p/environ >/dev/null 2>&1; then echo "parent environ: readable"; else echo "parent environ: denied"; fi
if (exec 3</proc/$p/mem) 2>/dev/null; then echo "parent mem: readable"; else echo "parent mem: denied"; fi
sleep 5 & c=$!
if cat /proc/$c/environ >/dev/null 2>&1; then echo "child environ: readable"; else echo "child environ: denied"; fi
kill $c' 2>&1)
rc=$?
echo "$out"
fail() { echo "launcher_private: FAIL: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "weftrun exited $rc"
grep -q "^parent: weftrun$" <<<"$out" || fail "the rank's parent is not weftrun"
grep -q "^child environ: readable$" <<<"$out" || fail "control: the rank cannot read its own child"
grep -q "^parent environ: denied$" <<<"$out" || fail "a rank reads weftrun's environment"
grep -q "^parent mem: denied$" <<<"$out" || fail "a rank opens weftrun's memory"
echo "launcher_private: PASS"
