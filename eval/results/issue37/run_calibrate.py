"""Run `citebot calibrate` against the eval's whole-archive index (/work/cache/37/pg)."""
import os
import subprocess
import sys
import time
from pathlib import Path

from eval.stack.launcher import Launcher
from eval.stack.postgres import ensure_database
from eval.stack.services import export_key

export = Path("/work/shared/data/urho3d").resolve()
out = Path(sys.argv[1])
extra = sys.argv[2:]
with Launcher(Path("/work/cache/37/calib-logs")) as launcher:
    url = launcher.postgres(Path("/work/cache/37/pg"))
    index_db = ensure_database(url, f"citebot_eval_{export_key(export)}")
    env = {**os.environ, "CITEBOT_DATABASE__URL": index_db}
    subprocess.run([sys.executable, "-m", "worker.cli", "db", "migrate"], env=env, check=True)
    t0 = time.perf_counter()
    rc = subprocess.call(
        [sys.executable, "-m", "worker.cli", "calibrate", "--source", "file", "--path", str(export), "--out", str(out), *extra],
        env=env,
    )
    print(f"calibrate exit {rc} in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()})")
    subprocess.call([sys.executable, "-m", "worker.cli", "calibrate", "--report"], env=env)
