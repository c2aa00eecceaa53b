#!/usr/bin/env bash
# The GPU path's checks on a CUDA machine, in one run of at most 10 minutes. Everything measured
# goes under $OUT (default ./device_check_out): one log per step, the benchmarks' JSON rows, the
# return curve of a short Pong run, and device_check.json, the summary (each step's exit code and
# seconds).
#
#   bash scripts/device_check.sh
#
# Steps (in this order; each has its own time limit, and a failed step does not stop the next):
#   1. nvidia-smi and torch's view of the device                            gpu.txt
#   2. benchmark.py --learner at B = 32 and 256 (+ the learner-loop rows at B = 32): plain,
#      --compile (CUDA graphs), --amp bf16; and the loop rows with --replay-device cuda   learner_*.json
#   3. benchmark.py --train with 16 envs: the defaults, and --replay-device cuda   train.json
#   4. benchmark.py --env at 128 and 256 envs (Pong, 44 px): a process per env, batched
#      workers (K envs per worker process), ALE's C++ AtariVectorEnv with a thread per core  env.json
#   5. PQN on Breakout with 128 envs in batched workers (--algo pqn, rollouts of 32 steps,
#      2 epochs of 32 minibatches of 128, as Gallici et al.'s Atari runs), 90 s: its agent
#      steps/s in the log's last line and in the run's TensorBoard            pqn_breakout.log
#   6. a --preset pong --device cuda run for what is left of the 10 minutes, at most 250 s, and
#      meanwhile the CUDA-parametrized tests
#      (tests/test_gpu_path.py -k cuda)                                      pong_curve.json, tests.log
#
# Dependencies: PyTorch, numpy, opencv, tensorboard and tqdm are expected installed. What is
# missing of gymnasium, ale-py, pytest and hypothesis is installed from the wheels in .whl/ at the
# project's root (no network needed). Fetch them beforehand on a machine with network access, from
# the project's root, for CPython 3.12 on manylinux x86-64:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     --platform any -d .whl ale-py==0.12.1 gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==2.1.0 \
#     pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0 packaging==26.2 pygments==2.20.0 \
#     hypothesis==6.155.2 attrs==26.1.0 sortedcontainers==2.4.0
#
# and copy .whl/ to the GPU machine with the project.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
START=$(date +%s)
STEPS="$OUT/steps.jsonl"
: > "$STEPS"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it with a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2 begin rc
  shift 2
  begin=$(date +%s)
  echo "== $name (at most ${limit}s): $*"
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - begin ))}" >> "$STEPS"
  echo "   rc=$rc in $(( $(date +%s) - begin ))s; tail of $name.log:"
  tail -n 4 "$OUT/$name.log" | sed 's/^/   /'
}

# -- wheels -----------------------------------------------------------------------------------
if ! python3 -c "import gymnasium, ale_py, pytest, hypothesis" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl > "$OUT/wheels.log" 2>&1
    export PYTHONPATH=/tmp/site:$PWD
  else
    echo "gymnasium/ale-py/pytest/hypothesis missing and no .whl/ folder: see this script's header" | tee "$OUT/wheels.log"
  fi
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}

# -- 1. the device ------------------------------------------------------------------------------
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0),
'bf16', torch.cuda.is_bf16_supported())"; nproc; } > "$OUT/gpu.txt" 2>&1

# -- 2. the learner -----------------------------------------------------------------------------
LEARNER=(python3 scripts/benchmark.py --learner --device cuda --learner-batches 32 256 --loop-batches 32
         --learner-seconds 1.5 --repeats 1 --num-envs 16)
step learner_plain 60 "${LEARNER[@]}" --json "$OUT/learner_plain.json"
step learner_bf16 60 "${LEARNER[@]}" --amp bf16 --json "$OUT/learner_bf16.json"
step learner_compile 130 "${LEARNER[@]}" --compile --json "$OUT/learner_compile.json"
step learner_replay_cuda 45 "${LEARNER[@]}" --replay-device cuda --json "$OUT/learner_replay_cuda.json"

# -- 3. end to end ------------------------------------------------------------------------------
step train 100 python3 scripts/benchmark.py --train --device cuda --num-envs 16 --repeats 1 \
  --replay-device cuda --json "$OUT/train.json"

# -- 4. the env pipelines at 128 and 256 envs --------------------------------------------------------
step env 100 python3 scripts/benchmark.py --env --env-nums 128 256 --env-id PongNoFrameskip-v4 --env-screen-size 44 \
  --env-steps 20000 --repeats 1 --json "$OUT/env.json"

# -- 5. PQN on Breakout, 128 envs ----------------------------------------------------------------
if python3 scripts/train.py --help 2>/dev/null | grep -q -- '--envs-per-worker'; then
  step pqn_breakout 90 python3 scripts/train.py --algo pqn --env-id BreakoutNoFrameskip-v4 --num-envs 128 \
    --rollout-steps 32 --epochs 2 --minibatches 32 --learning-rate 2.5e-4 --gamma 0.99 --amp bf16 --device cuda \
    --total-steps 400000 --checkpoint-every 0 --eval-every 0 --log-every 8192 --log-dir "$OUT/runs" \
    --run-name pqn_breakout
else
  echo '{"step": "pqn_breakout", "skipped": "this version has no --envs-per-worker"}' >> "$STEPS"
fi

# -- 6. Pong for what is left, the CUDA tests beside it ------------------------------------------
# Whatever is left of the 10 minutes (less 15 s for the summary), at most 250 s: a ~4-minute run.
LEFT=$(( 585 - ($(date +%s) - START) ))
LEFT=$(( LEFT > 250 ? 250 : LEFT ))
if [ "$LEFT" -lt 60 ]; then
  echo "{\"step\": \"pong\", \"skipped\": \"only ${LEFT}s left\"}" >> "$STEPS"
  PONG=
elif python3 scripts/train.py --help 2>/dev/null | grep -q '^  pong:'; then
  step pong "$LEFT" python3 scripts/train.py --preset pong --device cuda --log-dir "$OUT/runs" --run-name pong \
    --checkpoint-every 0 --eval-every 0 &
  PONG=$!
else
  echo '{"step": "pong", "skipped": "this version has no --preset pong"}' >> "$STEPS"
  PONG=
fi
step tests "$(( LEFT > 70 ? LEFT - 10 : 60 ))" python3 -m pytest -q -p no:cacheprovider tests/test_gpu_path.py -k cuda -rs
[ -n "$PONG" ] && wait "$PONG"

# -- summary ------------------------------------------------------------------------------------
python3 - "$OUT" "$START" <<'PY'
import json, sys, time
from pathlib import Path

out, start = Path(sys.argv[1]), float(sys.argv[2])
summary = {"seconds": round(time.time() - start), "steps": [json.loads(l) for l in (out / "steps.jsonl").open()]}
for name in ("learner_plain", "learner_bf16", "learner_compile", "learner_replay_cuda", "train", "env"):
    path = out / f"{name}.json"
    summary[name] = json.loads(path.read_text()) if path.exists() else None
pqn_run = out / "runs" / "pqn_breakout"
if pqn_run.exists():
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(pqn_run), size_guidance={"scalars": 0})
    acc.Reload()
    summary["pqn_breakout_sps"] = [[e.step, round(e.value)] for e in acc.Scalars("charts/SPS")] \
        if "charts/SPS" in acc.Tags()["scalars"] else None
events = sorted((out / "runs" / "pong").glob("events.out.tfevents.*")) if (out / "runs" / "pong").exists() else []
if events:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    first = min(e.wall_time for tag in tags for e in acc.Scalars(tag)) if tags else 0.0
    curve = {tag: [[round((e.wall_time - first) / 60, 3), e.step, e.value] for e in acc.Scalars(tag)]
             for tag in ("charts/episodic_return", "charts/SPS", "losses/td_loss") if tag in tags}
    (out / "pong_curve.json").write_text(json.dumps({"columns": ["minutes", "agent_step", "value"], **curve}))
    summary["pong_curve"] = {tag: len(points) for tag, points in curve.items()}
(out / "device_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps({k: v for k, v in summary.items() if k == "steps" or k == "seconds"}, indent=1))
PY
