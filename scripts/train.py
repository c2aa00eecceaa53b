#!/usr/bin/env python
"""Train a Q-learning agent (DQN, or PQN with ``--algo pqn``) on an Atari game:
``python scripts/train.py --help`` lists every option.

Example (a short CPU run)::

    python scripts/train.py --total-steps 50000 --num-envs 4 --buffer-size 50000 --learning-starts 5000

Exit codes: 0 done; 2 bad input; 130/143 stopped by SIGINT/SIGTERM (checkpoint written);
1 an env worker or actor failed or the loss became non-finite (one line; the traceback in the
run folder's error.log). A signal after the run finished (its final checkpoint written) stops
nothing: exit code 0 and one line saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vecdqn.cli import PROG, main  # noqa: E402
from vecdqn.signals import exit_process  # noqa: E402

if __name__ == "__main__":
    exit_process(main(), PROG)
