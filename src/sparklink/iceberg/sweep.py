"""The Iceberg sink's files on the storage seam, and the sweep of files of failed attempts
(driver side).

Every file this sink writes carries its writer's **owner tag** in its name (8 hex digits of a
hash of the writer's identity: the checkpoint's app id and checkpoint id, or a ``df.write``'s
``txnAppId``), and the executors' files the batch (``b<batch id>``, a ``df.write``'s
``txnVersion``): ``<owner>-[changes-]b<batch>-p<task>-a<attempt>-<uuid>-<n>.parquet``; the
files the upsert's merge writes on the driver are pyiceberg's ``00000-<n>-<uuid>.parquet`` with a
uuid that starts with the owner tag.

After a commit of batch ``N`` (once per driver process and after every restore), the sink lists
``<table location>/data/`` through :mod:`sparklink.storage` and removes each file of its own owner
tag that no snapshot of the table references (data and delete files of every snapshot still in
the metadata), if it is an executor file of a batch ``<= N`` or a driver merge file (never in
flight once the commit returned): files of killed tasks and drivers, staged changes, merge
files of lost compare-and-swaps. Other writers' files (another owner tag) are never touched.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping

from sparklink.storage import FileStorage, open_storage, parse_location

LOG = logging.getLogger(__name__)
_SWEPT: set[tuple[str, str]] = set()  # (table, owner) swept by this process since its last restore
_EXECUTOR_FILE = re.compile(r"^(?P<owner>[0-9a-f]{8})-(?:changes-)?b(?P<batch>\d{8})-")
_DRIVER_FILE = re.compile(r"^\d{5}-\d+-(?P<owner>[0-9a-f]{8})")


def owner_tag(identity) -> str:
    """8 hex digits naming one writer (a checkpoint's identity)."""
    return hashlib.sha1(f"{identity.app_id}\0{identity.checkpoint_id}".encode()).hexdigest()[:8]


def txn_owner_tag(txn_app_id: str) -> str:
    """8 hex digits naming the writer of a ``df.write`` with ``txnAppId``."""
    return hashlib.sha1(f"txn\0{txn_app_id}".encode()).hexdigest()[:8]


def s3_options(catalog_properties: Mapping[str, str]) -> dict[str, str]:
    """The storage seam's S3 options from pyiceberg's FileIO properties (``s3.endpoint``,
    ``s3.region``, ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``,
    ``s3.force-virtual-addressing``): the one place they are translated."""
    pairs = {"s3.endpoint": "s3.endpoint", "s3.region": "s3.region", "s3.access-key-id": "s3.accessKeyId",
             "s3.secret-access-key": "s3.secretAccessKey", "s3.session-token": "s3.sessionToken"}
    options = {ours: catalog_properties[theirs] for theirs, ours in pairs.items() if catalog_properties.get(theirs)}
    virtual = str(catalog_properties.get("s3.force-virtual-addressing", "false")).lower() == "true"
    options["s3.pathStyleAccess"] = "false" if virtual else "true"
    return options


def table_storage(location: str, catalog_properties: Mapping[str, str]) -> FileStorage:
    """The table location as a :class:`FileStorage` of the storage seam (local or S3; another
    scheme is refused naming the location)."""
    return open_storage(parse_location("catalog.warehouse", location.rstrip("/")), s3_options(catalog_properties))


def referenced_files(table) -> set[str]:
    """Every data and delete file any snapshot still in the metadata references (full URIs)."""
    seen_manifests: set[str] = set()
    files: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                files.add(entry.data_file.file_path)
    return files


def sweep(table, catalog_properties: Mapping[str, str], owner: str, up_to_batch: int | None) -> list[str]:
    """Remove the unreferenced files of ``owner`` (see the module's docstring); their URIs."""
    storage = table_storage(table.location(), catalog_properties)
    candidates = []
    for info in storage.list("data/"):
        name = info.key.rsplit("/", 1)[-1]
        executor = _EXECUTOR_FILE.match(name)
        if executor is not None and executor.group("owner") == owner:
            if up_to_batch is None or int(executor.group("batch")) <= up_to_batch:
                candidates.append(info.key)
            continue
        driver = _DRIVER_FILE.match(name)
        if driver is not None and driver.group("owner") == owner:
            candidates.append(info.key)
    if not candidates:
        return []
    # keys relative to the table location, as the storage seam lists them
    location = table.location().rstrip("/") + "/"
    referenced = {path[len(location):] for path in referenced_files(table) if path.startswith(location)}
    removed = []
    for key in candidates:
        if key not in referenced:
            storage.delete(key)
            removed.append(storage.uri(key))
    if removed:
        LOG.info("removed %s file(s) of failed attempts from %s (owner %s), e.g. %s", len(removed),
                 table.location(), owner, removed[0])
    return removed


def mark_restored(table_name: str, owner: str) -> None:
    """After a restore: the next commit of ``owner`` into ``table_name`` sweeps again."""
    _SWEPT.discard((table_name, owner))


def sweep_once(load_table, table_name: str, catalog_properties: Mapping[str, str], owner: str,
               up_to_batch: int | None) -> list[str]:
    """:func:`sweep` the first time this process commits for ``owner`` (and after a restore)."""
    if not owner or (table_name, owner) in _SWEPT:
        return []
    removed = sweep(load_table(), catalog_properties, owner, up_to_batch)
    _SWEPT.add((table_name, owner))
    return removed
