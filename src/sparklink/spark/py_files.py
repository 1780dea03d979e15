"""The zip that ships sparklink to executors (``--py-files`` / ``spark.submit.pyFiles``), built
on the driver machine once per submission."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path


def build_py_files_zip(destination: str | os.PathLike[str]) -> Path:
    """Zip the installed ``sparklink`` package for ``--py-files`` / ``spark.submit.pyFiles``."""
    package_dir = Path(__file__).resolve().parent.parent  # sparklink/, found without importing it from below
    target = Path(destination)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package_dir.rglob("*.py")):
            archive.write(path, Path("sparklink") / path.relative_to(package_dir))
    return target
