#!/bin/busybox sh
# rdma-core's own test suite (pyverbs, from Debian's python3-pyverbs) on
# rmlx5_0 through libmlx5, one test module at a time (a module that crashes
# its interpreter fails alone). One marker per test: PASS for a test that
# passed, FAIL for one that failed or raised an error; a test the suite
# skips (a feature rmlx5 refuses with EOPNOTSUPP, or one the suite finds
# missing) is listed with its reason and counted, not marked.
#
#   pyverbs.sh [module...]    default: every tests/test_*.py
#
# RMLX5_PYVERBS_DEV names the device (default rmlx5_0) and
# RMLX5_PYVERBS_PREFIX is put before every marker (tests/guest/pci-smoke.sh
# runs the suite on the ConnectX function with cx_).
#
# Markers as /init's: rmlx5-test: PASS|FAIL <name>.
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
pass() { echo "rmlx5-test: PASS $1"; }
fail() { echo "rmlx5-test: FAIL $1: $2"; }
tests=/usr/share/rdma-core/tests
dev=${RMLX5_PYVERBS_DEV:-rmlx5_0}
pfx=${RMLX5_PYVERBS_PREFIX:-}
if [ ! -x /usr/bin/python3 ] || [ ! -f $tests/run_tests.py ]; then
    fail ${pfx}pyverbs_suite "no python3 or rdma-core tests in the guest (scripts/bench-userland.sh check)"
    exit 0
fi
ifconfig lo 127.0.0.1 up 2>/dev/null
modules=$*
[ -n "$modules" ] || modules=$(cd $tests && ls test_*.py | sed 's/\.py$//')
# Left out, each with why (Documentation/rdma-core.md, "pyverbs"):
# - test_mem_align_srq_excq_rc_traffic: rmlx5 refuses SRQs and the test
#   skips, but pyverbs 44 then crashes tearing the parent domain down
#   (segfault in pd.so), which would take the module's other tests along.
# RMLX5_PYVERBS_LEFT_OUT adds more (pci-smoke.sh, with its reasons).
left_out="tests.test_parent_domain.ParentDomainTrafficTest.test_mem_align_srq_excq_rc_traffic
${RMLX5_PYVERBS_LEFT_OUT:-}"
all_tests=$(cd $tests && python3 run_tests.py --dev $dev --list-tests 2>/dev/null)
n_pass=0 n_fail=0 n_skip=0
start=$(date +%s)
for m in $modules; do
    log=/tmp/pyverbs-$m.log
    # The module, or its tests one by one less those left out.
    names=$m
    excl=
    for x in $left_out; do
        case "$x" in
        tests.$m.*)
            excl="$excl $x"
            echo "rmlx5-guest: ${pfx}pyverbs left out ${x#tests.}"
            ;;
        esac
    done
    if [ -n "$excl" ]; then
        names=
        for t in $(echo "$all_tests" | grep "^tests\.$m\."); do
            case " $excl " in
            *" $t "*) ;;
            *) names="$names ${t#tests.}" ;;
            esac
        done
        # Nothing left of the module: run none of it, not (as run_tests.py
        # would without names) the whole suite; no list at all is a failure.
        if [ -z "$names" ]; then
            [ -n "$all_tests" ] ||
                fail "${pfx}pyverbs:$m" "run_tests.py --list-tests listed nothing"
            continue
        fi
    fi
    (cd $tests && timeout ${RMLX5_PYVERBS_TIMEOUT:-300} python3 run_tests.py --dev $dev -v $names) \
        > $log 2>&1
    rc=$?
    # unittest -v prints "test_x (tests.test_y.Z.test_x) ... RESULT", or
    # the header alone and "Docstring ... RESULT" on the next line, and the
    # result may come on a later line when the test printed; RESULT is ok,
    # skipped '...', FAIL, ERROR, expected failure.
    awk '
        match($0, /^test[^ ]* \(tests\.[^)]*\)/) {
            name = substr($0, RSTART, RLENGTH); sub(/^[^(]*\(tests\./, "", name); sub(/\)$/, "", name)
            rest = substr($0, RSTART + RLENGTH); res = ""
            if (index(rest, " ... ")) { res = rest; sub(/.* \.\.\. /, "", res) }
            header = 1
        }
        !header && name != "" && res == "" && index($0, " ... ") { res = $0; sub(/.* \.\.\. /, "", res) }
        !header && name != "" && res == "" && /^(ok|FAIL|ERROR|skipped|expected failure)/ { res = $0 }
        res !~ /^(ok|FAIL|ERROR|skipped|expected failure|unexpected success)/ { res = "" }
        { header = 0 }
        name != "" && res != "" {
            if (res ~ /^ok/ || res ~ /^expected failure/) print "PASS", name;
            else if (res ~ /^skipped/) { r = res; sub(/^skipped /, "", r); print "SKIP", name, r }
            else print "FAIL", name;
            name = ""; res = ""
        }
    ' $log > /tmp/pyverbs.results
    ran=0 failed=0
    while read -r what name rest; do
        ran=$((ran + 1))
        case "$what" in
        PASS) pass "${pfx}pyverbs:$name"; n_pass=$((n_pass + 1)) ;;
        FAIL) fail "${pfx}pyverbs:$name" "see the traceback in the console"; n_fail=$((n_fail + 1)); failed=1 ;;
        SKIP) echo "rmlx5-guest: ${pfx}pyverbs skipped $name: $rest"; n_skip=$((n_skip + 1)) ;;
        esac
    done < /tmp/pyverbs.results
    # The tracebacks of what failed.
    [ -n "$failed" ] && sed -n '/^=\{20,\}/,$p' $log
    # A module whose interpreter died or timed out fails as a whole.
    if ! grep -qE '^(OK|FAILED)' $log; then
        tail -n 30 $log
        fail "${pfx}pyverbs:$m" "run_tests.py exited $rc without a result (crash or timeout)"
        n_fail=$((n_fail + 1))
    fi
done
echo "rmlx5-guest: ${pfx}pyverbs on $dev: $n_pass passed, $n_fail failed, $n_skip skipped in $(($(date +%s) - start)) s"
