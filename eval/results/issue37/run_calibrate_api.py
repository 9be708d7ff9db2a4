"""Run `citebot calibrate --source api` against the local forum double serving the whole Urho3D export
(the eval's embedded stack over /work/cache/37/pg), the index being the eval's."""
import os
import subprocess
import sys
import time
from pathlib import Path

from eval.stack.forum.thread import LIFTED_BUDGET
from eval.stack.services import EmbeddedStack

export = Path("/work/shared/data/urho3d").resolve()
out = Path(sys.argv[1])
stack = EmbeddedStack(export, cache=Path("/work/cache/37/pg"))
settings = stack.start().settings
try:
    d = settings.discourse
    env = {
        **os.environ,
        "CITEBOT_DATABASE__URL": settings.database.url,
        "CITEBOT_DISCOURSE__BASE_URL": d.base_url,
        "CITEBOT_DISCOURSE__API_KEY": d.api_key.get_secret_value(),
        "CITEBOT_DISCOURSE__API_USERNAME": d.api_username,
        **{f"CITEBOT_DISCOURSE__{k.upper()}": str(v) for k, v in LIFTED_BUDGET.items()},
    }
    t0 = time.perf_counter()
    rc = subprocess.call(
        [sys.executable, "-m", "worker.cli", "calibrate", "--source", "api", "--out", str(out)], env=env
    )
    print(f"calibrate exit {rc} in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()})")
finally:
    stack.stop()
