#!/usr/bin/env bash
# Runs the cargo-fuzz targets of this directory, each for a bounded time or
# a bounded number of inputs.
#
#   fuzz/run.sh SECONDS [TARGET...]              every target (or those named) for SECONDS each
#   fuzz/run.sh --runs N [--out FILE] [TARGET...]  N inputs each (libFuzzer's -runs=N, no time bound)
#
# --no-asan builds without AddressSanitizer (cargo fuzz -s none): about
# three times the inputs a second (4,000 instead of 1,300 for `requests`
# on the 2-core lab machine). The request path is safe Rust but for the
# `ByteValued` marker on the wire's plain-old-data structs and vm-memory's
# own accessors behind it, so a panic, an overflow (debug assertions stay
# on), a failed assertion or a hang is what a run finds either way; ASAN
# adds checks inside unsafe code only. CI's short runs keep ASAN.
#
# --max-len BYTES caps an input's size (libFuzzer's -max_len; its default
# grows to 4096): `requests` slows from 3,500 to 1,200 inputs a second as
# its inputs grow past 2 KB (about 60 requests each), so a 10-million run
# fits a session only with a cap; 1024 bytes still hold 30 and more requests.
#
# --out FILE (either form) also writes a result file: the command, the
# commit, the date, and per target libFuzzer's final "Done ... runs" line
# and stat:: lines, then rc=N (the format of the committed fuzzing
# results). E.g. a long run of the guest's main attack surface alone:
#
#   fuzz/run.sh --runs 10000000 --out fuzz-requests-$(date +%F).txt requests
#
# FUZZ_TARGET_DIR, if set, is where the fuzz targets build (cargo fuzz
# --target-dir; .ci/run keeps it outside the clone), else fuzz/target.
#
# The committed seed corpus (corpus/<target>/) is read, never written: new
# inputs go to a temporary directory. A crash fails the script and leaves
# the reproducer under fuzz/artifacts/<target>/.
set -euo pipefail
usage="usage: fuzz/run.sh [--no-asan] [--max-len BYTES] SECONDS [TARGET...] | fuzz/run.sh [--no-asan] [--max-len BYTES] --runs N [--out FILE] [TARGET...]"
secs='' runs='' out='' targets=() san=() maxlen=()
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) runs=${2:?$usage} && shift 2 ;;
	--out) out=${2:?$usage} && shift 2 ;;
	--no-asan) san=(-s none) && shift ;;
	--max-len) maxlen=(-max_len="${2:?$usage}") && shift 2 ;;
	-h | --help) echo "$usage" && exit 0 ;;
	-*) echo "$usage" >&2 && exit 2 ;;
	*)
		if [ -z "$secs" ] && [ -z "$runs" ] && [ ${#targets[@]} -eq 0 ]; then
			secs=$1
		else
			targets+=("$1")
		fi
		shift
		;;
	esac
done
for n in "$secs" "$runs"; do
	[ -z "$n" ] || [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "$usage ($n is not a positive number)" >&2 && exit 2; }
done
[ -n "$secs$runs" ] || { echo "$usage" >&2 && exit 2; }
[ -z "$secs" ] || [ -z "$runs" ] || { echo "$usage (SECONDS or --runs, not both)" >&2 && exit 2; }
[ -z "$out" ] || out=$(realpath -m "$out")
cd "$(dirname "$0")"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
	cargo install cargo-fuzz --locked
fi
known=$(cargo +nightly fuzz list)
[ ${#targets[@]} -gt 0 ] || read -r -d '' -a targets <<<"$known" || true
for t in "${targets[@]}"; do
	grep -qx -- "$t" <<<"$known" || { echo "fuzz/run.sh: no fuzz target $t (there are: $(tr '\n' ' ' <<<"$known"))" >&2 && exit 2; }
done
if [ -n "$runs" ]; then
	bound=(-runs="$runs") what="$runs inputs"
else
	bound=(-max_total_time="$secs") what="${secs}s"
fi
flags=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${maxlen[@]+"${maxlen[@]}"})
if [ -n "$out" ]; then
	mkdir -p "$(dirname "$out")"
	{
		echo "# fuzz/run.sh ${san[*]:+--no-asan }${maxlen[*]:+--max-len ${maxlen[0]#-max_len=} }${runs:+--runs $runs }${secs:+$secs }${targets[*]} at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) ($(date -u +%FT%TZ), $(nproc) CPUs)"
		echo "# command per target: cargo +nightly fuzz run ${san[*]:+${san[*]} }TARGET WORK corpus/TARGET -- ${bound[*]} ${flags[*]}"
	} >"$out"
fi
rc=0
for target in "${targets[@]}"; do
	work="$(mktemp -d)"
	trap 'rm -rf "$work"' EXIT
	echo "fuzzing $target for $what"
	[ -z "$out" ] || echo "fuzzing $target for $what" >>"$out"
	log="$work.log"
	set +e
	cargo +nightly fuzz run ${san[@]+"${san[@]}"} --target-dir "${FUZZ_TARGET_DIR:-target}" "$target" "$work" "corpus/$target" -- "${bound[@]}" "${flags[@]}" 2>&1 | tee "$log"
	trc=${PIPESTATUS[0]}
	set -e
	[ -z "$out" ] || grep -E '^(Done [0-9]+ runs|stat::)|^==[0-9]+==|^SUMMARY:' "$log" >>"$out" || true
	unbuilt=$(grep -c 'failed to build fuzz script' "$log" || true)
	rm -rf "$work" "$log"
	trap - EXIT
	if [ "$trc" -ne 0 ]; then
		rc=$trc
		if [ "$unbuilt" != 0 ]; then
			echo "fuzz/run.sh: $target does not build (exit $trc): the compiler's errors are above" >&2
		else
			echo "fuzz/run.sh: $target failed (exit $trc); reproducer under fuzz/artifacts/$target/" >&2
		fi
		break
	fi
done
[ -z "$out" ] || { echo "rc=$rc" >>"$out" && echo "fuzz/run.sh: wrote $out"; }
exit "$rc"
