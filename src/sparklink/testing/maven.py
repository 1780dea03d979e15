"""JVM artifacts for tests and benchmarks (test side, never the runtime): jars resolved from the
pinned Maven manifests under ``tests/jvm/<set>/pom.xml`` into a cache outside git.

sparklink itself is jar-free. Its tests and benchmarks start real JVM software (Apache Kafka's
broker, Cassandra) and use Spark's own connectors as readers and peers; those jars come from
Maven Central through ``make jvm`` (``mvn dependency:copy-dependencies``), once per manifest
change, never from Spark's Ivy at run time (no ``spark.jars.packages``).

Layout: one manifest per *set* (a set is one classpath: the Kafka broker, Cassandra, Spark's
Kafka connector, ...), so that sets whose dependencies disagree never share a classpath.
The cache is ``$SPARKLINK_JVM_CACHE`` or ``~/.cache/sparklink/jvm``; a set's jars are in
``<cache>/<set>/`` with a stamp holding the manifest's hash, so an edited manifest is resolved
again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

JVM_MANIFESTS = Path(__file__).resolve().parents[3] / "tests" / "jvm"
STAMP = ".resolved"


def cache_root() -> Path:
    """Where resolved sets live (outside git)."""
    configured = os.environ.get("SPARKLINK_JVM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "sparklink" / "jvm"


def manifest(artifact_set: str) -> Path:
    path = JVM_MANIFESTS / artifact_set / "pom.xml"
    if not path.is_file():
        known = sorted(p.name for p in JVM_MANIFESTS.iterdir() if (p / "pom.xml").is_file())
        raise FileNotFoundError(f"no JVM artifact set {artifact_set!r} (no {path}); the sets are {known}")
    return path


def manifest_hash(artifact_set: str) -> str:
    return hashlib.sha256(manifest(artifact_set).read_bytes()).hexdigest()


def is_resolved(artifact_set: str) -> bool:
    stamp = cache_root() / artifact_set / STAMP
    return stamp.is_file() and stamp.read_text().strip() == manifest_hash(artifact_set)


def resolve(artifact_set: str) -> Path:
    """Resolves ``artifact_set`` into the cache if it is missing or its manifest changed, and
    returns its directory. Runs Maven (minutes the first time, with the network to Maven
    Central; seconds once ``~/.m2`` holds the artifacts)."""
    target = cache_root() / artifact_set
    if is_resolved(artifact_set):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.jar"):
        old.unlink()
    command = ["mvn", "-q", "-B", "-f", str(manifest(artifact_set)), "dependency:copy-dependencies",
               f"-DoutputDirectory={target}", "-DincludeScope=runtime"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise RuntimeError(f"resolving the JVM artifact set {artifact_set!r} failed "
                           f"({' '.join(command)}):\n{tail}")
    (target / STAMP).write_text(manifest_hash(artifact_set) + "\n")
    return target


def jars(artifact_set: str) -> list[Path]:
    """The jars of ``artifact_set`` (resolved first when missing), sorted by name."""
    found = sorted(resolve(artifact_set).glob("*.jar"))
    if not found:
        raise RuntimeError(f"the JVM artifact set {artifact_set!r} resolved to no jar in {cache_root() / artifact_set}")
    return found


def classpath(artifact_set: str) -> str:
    """``jars(artifact_set)`` joined for ``java -cp`` or ``spark.jars`` (``,`` for the latter: use
    ``spark_jars``)."""
    return os.pathsep.join(str(jar) for jar in jars(artifact_set))


def spark_jars(artifact_set: str) -> str:
    """The value of ``spark.jars`` for ``artifact_set``."""
    return ",".join(str(jar) for jar in jars(artifact_set))


def sets() -> list[str]:
    """Every artifact set the repository declares."""
    return sorted(p.name for p in JVM_MANIFESTS.iterdir() if (p / "pom.xml").is_file())


def main() -> None:
    """``python -m sparklink.testing.maven``: resolve every set (what ``make jvm`` runs)."""
    for artifact_set in sets():
        directory = resolve(artifact_set)
        print(f"{artifact_set}: {len(list(directory.glob('*.jar')))} jars in {directory}")


if __name__ == "__main__":
    main()
