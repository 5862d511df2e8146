"""Java libraries from Maven Central, resolved once into a cache outside the repository.

The tests, the benchmarks and the demo run Java programs (Apache Kafka's broker) straight from
their jars instead of a distribution tarball: Maven Central serves every release with its
dependency graph, and Maven (which the machine has for Spark's sake) resolves it.  Each set of
coordinates is fetched into ``${SLUICE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice}/maven/<name>/``
exactly once: the directory is filled under a temporary name, gets its completion marker last, and
is renamed into place, so a reader sees either nothing or every jar.  Concurrent callers (several
pytest-xdist workers, a test run beside ``make``) serialise on an ``fcntl`` lock; whoever gets it
second finds the work done.  A completed cache is answered from the marker alone, without Maven.

Only Maven Central is asked: Maven runs with settings of its own that mirror every repository to
Central (a POM that names another repository is still fetched from Central), so no other host is
contacted and the result does not depend on the user's ``~/.m2/settings.xml``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from xml.sax.saxutils import escape

from sluice.durable import atomic_write
from sluice.embedded.processes import ProcessError
from sluice.errors import InvalidArgument

__all__ = ["CENTRAL", "cache_root", "fetch_jars", "maven_dir"]

CENTRAL = "https://repo.maven.apache.org/maven2"
# Pinned so that a fetch does not depend on which plugin version Central calls newest today;
# 3.8.1 runs on Maven 3.6.3 and later (Debian 12 ships 3.8.7).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MARKER = ".complete"

_COORDINATE = re.compile(r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def cache_root() -> Path:
    """Sluice's cache directory: ``$SLUICE_CACHE``, else ``$XDG_CACHE_HOME/sluice``, else
    ``~/.cache/sluice`` (outside the repository, so ``git clean`` and a fresh clone keep it)."""
    explicit = os.environ.get("SLUICE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sluice"


def maven_dir(name: str) -> Path:
    """Where :func:`fetch_jars` keeps the jars fetched under ``name``."""
    return cache_root() / "maven" / name


def fetch_jars(name: str, coordinates: Sequence[str], *, timeout: float = 900.0) -> list[Path]:
    """The jars of ``coordinates`` (``group:artifact:version``) and of their runtime dependencies,
    fetched from Maven Central into :func:`maven_dir` ``(name)`` unless already there.

    A cached set is returned from its marker file in milliseconds.  A name whose cache holds other
    coordinates (a version bump) is fetched again.  The jars are sorted by file name, which is the
    classpath order: stable from run to run.

    :raises ProcessError: Maven is missing or fails; the message names the coordinates, Maven's
        last lines and what to check.
    """
    coordinates = list(coordinates)
    if not _NAME.match(name):
        raise InvalidArgument(f"a cache name must be letters, digits, '.', '_' or '-': {name!r}")
    bad = [c for c in coordinates if not _COORDINATE.match(c)]
    if bad or not coordinates:
        raise InvalidArgument(f"Maven coordinates must be group:artifact:version: {bad or coordinates}")
    target = maven_dir(name)
    jars = _completed(target, coordinates)
    if jars is not None:
        return jars
    target.parent.mkdir(parents=True, exist_ok=True)
    # One lock for the whole Maven cache: different names share Maven's local repository, whose
    # concurrent writers Maven 3.8 does not coordinate.
    with _locked(target.parent / ".lock"):
        jars = _completed(target, coordinates)  # another process may have finished meanwhile
        if jars is not None:
            return jars
        return _fetch(name, coordinates, target, timeout)


def _completed(target: Path, coordinates: list[str]) -> list[Path] | None:
    """The jars listed by ``target``'s marker when it was completed for these coordinates."""
    try:
        done = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict) or done.get("coordinates") != coordinates:
        return None
    jars = [target / jar for jar in done.get("jars", [])]
    return jars if jars and all(jar.is_file() for jar in jars) else None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (released when this process dies, however)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch(name: str, coordinates: list[str], target: Path, timeout: float) -> list[Path]:
    """Run Maven into a staging directory, mark it complete and rename it to ``target``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ProcessError(
            f"fetching {', '.join(coordinates)} needs Apache Maven (mvn, 3.6.3 or newer) on PATH: "
            "install it (Debian: apt-get install maven)"
        )
    staging = target.parent / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)  # left by a fetch that died; we hold the lock
    with tempfile.TemporaryDirectory(prefix="sluice-maven-") as work:
        pom, settings = Path(work) / "pom.xml", Path(work) / "settings.xml"
        pom.write_text(_pom(coordinates))
        settings.write_text(_settings(target.parent / ".repository"))
        # -U: Maven would otherwise remember a failed download (a network hiccup) for a day
        command = [mvn, "-q", "-B", "-U", "-Dstyle.color=never", "-s", str(settings), "-f", str(pom)]
        command += [f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime"]
        command += [f"-DoutputDirectory={staging}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=work)
        except subprocess.TimeoutExpired:
            raise ProcessError(
                f"fetching {', '.join(coordinates)} from Maven Central took over {timeout:.0f} s: "
                f"is {CENTRAL} reachable (and quick)?"
            ) from None
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join(_maven_lines(done.stdout + done.stderr)[-15:])
        raise ProcessError(
            f"mvn could not fetch {', '.join(coordinates)} from Maven Central (exit {done.returncode}):\n{tail}\n"
            f"Check that {CENTRAL} is reachable and that each group:artifact:version exists there; "
            f"then run again (nothing was cached under {target})."
        )
    jars = sorted(p.name for p in staging.glob("*.jar"))
    missing = [c for c in coordinates if f"{c.split(':')[1]}-{c.split(':')[2]}.jar" not in jars]
    if missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise ProcessError(f"mvn finished but left no jar for {', '.join(missing)} (a pom-only artifact?)")
    atomic_write(staging / MARKER, json.dumps({"coordinates": coordinates, "jars": jars}, indent=1).encode())
    shutil.rmtree(target, ignore_errors=True)  # an incomplete or outdated set under this name
    os.rename(staging, target)
    return [target / jar for jar in jars]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BOILERPLATE = ("To see the full stack trace", "Re-run Maven using", "For more information about", "[Help 1] http")


def _maven_lines(output: str) -> list[str]:
    """Maven's output without colour codes, blank ``[ERROR]`` lines and its generic advice."""
    lines = (_ANSI.sub("", line).rstrip() for line in output.splitlines())
    return [line for line in lines if line not in ("", "[ERROR]") and not any(b in line for b in _BOILERPLATE)]


def _pom(coordinates: list[str]) -> str:
    """A POM that depends on ``coordinates``: Maven resolves their graph as for any project."""
    dependencies = "".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
            *map(escape, c.split(":"))
        )
        for c in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>sluice.embedded</groupId><artifactId>fetch</artifactId><version>0</version>"
        f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>\n"
    )


def _settings(repository: Path) -> str:
    """Maven settings: a local repository inside Sluice's cache and every repository mirrored to Central."""
    return (
        '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">'
        f"<localRepository>{escape(str(repository))}</localRepository>"
        "<mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>"
        f"<url>{CENTRAL}</url></mirror></mirrors></settings>\n"
    )
