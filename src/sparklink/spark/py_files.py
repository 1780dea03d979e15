"""The zip that ships sparklink to executors (``--py-files`` / ``spark.submit.pyFiles``), built
on the driver machine once per submission."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path


def build_py_files_zip(destination: str | os.PathLike[str]) -> Path:
    """Zip the installed ``sparklink`` package for ``--py-files`` / ``spark.submit.pyFiles``."""
    import sparklink

    package_dir = Path(sparklink.__file__).parent
    target = Path(destination)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package_dir.rglob("*.py")):
            archive.write(path, Path("sparklink") / path.relative_to(package_dir))
    return target
