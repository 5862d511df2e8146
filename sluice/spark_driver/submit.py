"""``spark-submit`` entry file: ``spark-submit [spark options] <this file> [sluice-driver options]``.

``python -m sluice.spark_driver.submit --path`` prints this file's path, so a deployment need not
know where Sluice is installed.

spark-submit needs a Python file, not a console script; this one runs :func:`sluice.spark_driver.cli.submit_main`
with the SparkSession spark-submit configured (master, executors, packages), so the same app runs
locally through ``sluice-driver`` and on a cluster through spark-submit.
"""

import sys
from pathlib import Path

from sluice.spark_driver.cli import submit_main

if __name__ == "__main__":
    if sys.argv[1:] == ["--path"]:
        print(Path(__file__).resolve())  # the file itself, not a link of an editable install
        sys.exit(0)
    sys.exit(submit_main(sys.argv[1:]))
