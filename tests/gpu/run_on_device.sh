#!/bin/bash
# The pool tier on the GPU machine, in one device call: unpack .gpu/ (tests/gpu/bundle.py),
# give the chroot the host's NVIDIA driver libraries, run the GPU pool tests and one
# existing pool test, and leave the logs in $OUT (4 files: run.log, gpu.xml, smoke.xml,
# pool-logs.tar.gz).
# Run from anywhere, as root; tests/gpu/README.md has the exact device call.
#
# Environment (all optional but OUT):
#   OUT                  where the logs go (the device tool's folder)
#   EXECD_GPU_BUNDLE     the bundle folder (default: <repo>/.gpu)
#   EXECD_GPU_WORK       where the chroot is unpacked (default: /var/tmp/execd-gpu)
#   EXECD_GPU_SITE       pip's --target for the wheels (default: /tmp/site)
#   EXECD_GPU_TESTS      the GPU tests (default: test_pool_gpus.py's [real] variant where
#                        /dev/nvidia0 exists, else the whole file: its simulated variants)
#   EXECD_GPU_SMOKE      the existing pool test run after them
#   EXECD_GPU_DEADLINE_S seconds the whole run may take (default 570: the call's 600 s
#                        limit less a margin for the copy of $OUT)
#   EXECD_GPU_DRIVER_DIRS where to look for the NVIDIA libraries when `ldconfig -p` does
#                        not name them (default: /usr/local/nvidia/lib64 and the usual)
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${OUT:?set OUT to the folder the logs go to}"
BUNDLE=${EXECD_GPU_BUNDLE:-$REPO/.gpu}
WORK=${EXECD_GPU_WORK:-/var/tmp/execd-gpu}
ROOT=$WORK/pool
SITE=${EXECD_GPU_SITE:-/tmp/site}
GPU_TESTS=${EXECD_GPU_TESTS:-tests/pool/test_pool_gpus.py}
SMOKE=${EXECD_GPU_SMOKE:-tests/pool/test_pool_jobs.py::test_same_user_log_on_execd_run_as_condor_startd}
DEADLINE_S=${EXECD_GPU_DEADLINE_S:-570}
DRIVER_DIRS=${EXECD_GPU_DRIVER_DIRS:-/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64}
# The device image's pytest has plugins this repo does not use; -p no: keeps them out
# (pytest-benchmark and xdist add options and warnings that the strict config refuses).
PYTEST=(python3 -m pytest -p no:cacheprovider -p no:benchmark -p no:xdist -rA -v)
export PYTHONUNBUFFERED=1

step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

unmount_under() {  # deepest first; a bind mount of /dev must never be deleted through
	awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts |
		sort -r | while read -r point; do umount "$point" || umount -l "$point"; done
}

unpack() {
	step "unpack $BUNDLE/chroot.tar.xz into $ROOT"
	unmount_under "$ROOT"
	rm -rf --one-file-system "$ROOT" "$ROOT.built" "$ROOT.lock"
	mkdir -p "$ROOT"
	if command -v xz >/dev/null; then
		tar --numeric-owner -xJf "$BUNDLE/chroot.tar.xz" -C "$ROOT" || return 1
	else  # Python's lzma is always there; owners stay numeric (the device's passwd differs)
		python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t: t.extractall(sys.argv[2], numeric_owner=True, filter="fully_trusted")' \
			"$BUNDLE/chroot.tar.xz" "$ROOT" || return 1
	fi
	# The stamp tiers.pool_built() looks for: written only once the chroot is complete.
	chroot "$ROOT" condor_version | head -1 >"$ROOT.built" || return 1
	cat "$ROOT.built"
	du -sh "$ROOT"
}

# condor_gpu_discovery (the reference condor_startd's) dlopens the driver's libraries by
# name; the device's driver lives outside the chroot (/usr/local/nvidia, read-only), so
# copies go where the chroot's loader looks. /dev/nvidia* come with the harness's bind of
# /dev.
give_chroot_the_driver() {
	step "NVIDIA driver libraries into the chroot"
	local lib dir found target=$ROOT/usr/lib/x86_64-linux-gnu
	for lib in libnvidia-ml.so.1 libcuda.so.1 libnvidia-ptxjitcompiler.so.1; do
		found=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l && /x86-64/ { print $NF; exit }')
		for dir in $DRIVER_DIRS; do
			[ -n "$found" ] && break
			[ -e "$dir/$lib" ] && found=$dir/$lib
		done
		if [ -z "$found" ]; then
			echo "$lib: not found on this host"
			continue
		fi
		cp -L "$found" "$target/$lib" && echo "$lib <- $found ($(readlink -f "$found"))"
	done
	# condor_gpu_discovery opens "libcuda.so" (then NVML's "libnvidia-ml.so.1", falling
	# back to "libnvidia-ml.so"): the unversioned names a -dev package would provide.
	[ -e "$target/libcuda.so.1" ] && ln -sfn libcuda.so.1 "$target/libcuda.so"
	[ -e "$target/libnvidia-ml.so.1" ] && ln -sfn libnvidia-ml.so.1 "$target/libnvidia-ml.so"
	chroot "$ROOT" ldconfig
}

discover_gpus() {
	step "GPUs: nvidia-smi, condor_gpu_discovery in the chroot, execd's NVML view"
	nvidia-smi -L
	nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version,pci.bus_id --format=csv
	ls -la /dev/nvidia*
	mount --bind /dev "$ROOT/dev" && mount -t proc proc "$ROOT/proc" &&
		mount -t sysfs sysfs "$ROOT/sys" &&
		chroot "$ROOT" /usr/libexec/condor/condor_gpu_discovery -properties -extra -diagnostic
	echo "condor_gpu_discovery exited $?"
	unmount_under "$ROOT"
	(cd "$REPO" && python3 -m execd status --local -long 2>&1 | grep -Ei 'gpu|cuda' | head -40)
}

host_facts() {
	step "host"
	uname -a
	nproc
	python3 --version
	command -v python3
	id nobody
	cat /proc/self/cgroup
	for tool in chroot mount umount ss tar xz nvidia-smi ldconfig; do
		printf '%-11s %s\n' "$tool" "$(command -v "$tool" || echo MISSING)"
	done
	(cd "$REPO" && python3 tests/tiers.py check)
	# The whole pool talks over 127.0.0.1; a VM without network may come with lo down.
	if ! python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
socket.create_connection(s.getsockname(), timeout=5)' 2>/dev/null; then
		echo "loopback unusable: ip link set lo up"
		ip link set lo up
	fi
}

# The pool wipes its LOCAL_DIR (logs included) at each start: keep the daemons' logs of
# the last pool a test run used before the next run starts one.
keep_pool_logs() {
	rm -rf "$WORK/pool-logs-$1"
	cp -a "$ROOT/var/lib/execd-pool/log" "$WORK/pool-logs-$1" 2>/dev/null
}

main() {
	step "wheels from $BUNDLE/wheels into $SITE"
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target "$SITE" "$BUNDLE"/wheels/*.whl || return 1
	export PYTHONPATH=$SITE:$REPO
	unpack || { echo "the bundle did not unpack: run tests/gpu/bundle.py build again"; return 1; }
	export EXECD_POOL_ROOT=$ROOT
	host_facts
	local gpu_env=() gpu_rc=0 smoke_rc=0
	if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
		give_chroot_the_driver
		discover_gpus
		gpu_env=(env EXECD_GPU_POOL=1)
		# CI runs the simulated variants; the device's few minutes go to the real GPUs
		[ -n "${EXECD_GPU_TESTS:-}" ] ||
			GPU_TESTS="tests/pool/test_pool_gpus.py::test_gpu_jobs_see_only_their_gpus_as_on_condor_startd[real]"
	else
		step "no /dev/nvidia0: GPU steps skipped (the GPU tests run without EXECD_GPU_POOL)"
	fi
	if [ -e "$REPO/${GPU_TESTS%%::*}" ]; then
		# Whatever is left, less 150 s for the smoke test.
		local limit=$((DEADLINE_S - SECONDS - 150))
		[ "$limit" -ge 120 ] || limit=120
		step "GPU tests (EXECD_GPU_POOL=${gpu_env:+1}), at most ${limit}s"
		(cd "$REPO" && timeout -k 10 "$limit" "${gpu_env[@]}" "${PYTEST[@]}" \
			--junitxml="$OUT/gpu.xml" "$GPU_TESTS")
		gpu_rc=$?
		keep_pool_logs gpu
	else
		step "GPU tests: $GPU_TESTS is not in this tree"
		gpu_rc=2
	fi
	local left=$((DEADLINE_S - SECONDS - 15))
	if [ "$left" -ge 60 ]; then
		step "smoke test, at most ${left}s"
		(cd "$REPO" && timeout -k 10 "$left" "${PYTEST[@]}" --junitxml="$OUT/smoke.xml" "$SMOKE")
		smoke_rc=$?
		keep_pool_logs smoke
	else
		step "smoke test skipped: only ${left}s left"
		smoke_rc=124
	fi
	step "done: GPU tests rc=$gpu_rc, smoke test rc=$smoke_rc, wall ${SECONDS}s"
	[ "$gpu_rc" -eq 0 ] && [ "$smoke_rc" -eq 0 ]
}

mkdir -p "$OUT" "$WORK"
main 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
# The pool daemons' logs of both runs: one file back.
tar -czf "$OUT/pool-logs.tar.gz" -C "$WORK" --ignore-failed-read pool-logs-gpu pool-logs-smoke \
	2>/dev/null
exit "$rc"
