"""JSON lines (executor side): one JSON object per line, read with ``pyarrow.json`` and, for
segments holding a malformed line, record by record with Python's ``json`` to locate it.

Fields of an object that are not in the schema are ignored; missing fields are null.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.json as pajson

from sparklink.files.source.bad_records import location
from sparklink.files.source.compression import codec_for, read_whole
from sparklink.files.source.config import MAX_AUTO_BATCH_ROWS, FileSourceConfig
from sparklink.files.source.file_input import open_binary
from sparklink.files.source.formats.base import (
    FileFormat,
    RawRecord,
    SegmentInput,
    lines_with_offsets,
    records_to_batch,
    with_null_corrupt_column,
)
from sparklink.files.source.formats.text import segment_bytes

INFER_BYTES = 4 * 1024 * 1024


class JsonLinesFormat(FileFormat):
    name = "json"

    def infer_schema(self, path: str, config: FileSourceConfig) -> pa.Schema:
        codec = codec_for(path, config.compression)
        if codec is None:
            with open_binary(path, config.s3) as handle:
                head = handle.read(INFER_BYTES)
        else:
            head = read_whole(path, codec, config.s3)[:INFER_BYTES]
        if len(head) == INFER_BYTES:
            head = head[: head.rfind(b"\n") + 1]
        return pajson.read_json(io.BytesIO(head)).schema

    def read(self, source: SegmentInput) -> Iterator[pa.RecordBatch]:
        body, base = segment_bytes(source)
        if not body.strip():
            return
        wanted = list(source.data_schema.names)
        try:
            table = pajson.read_json(
                io.BytesIO(body),
                read_options=pajson.ReadOptions(block_size=max(1 << 20, min(len(body) + 1, 1 << 24))),
                parse_options=pajson.ParseOptions(explicit_schema=source.data_schema,
                                                  unexpected_field_behavior="ignore"),
            )
        except pa.ArrowInvalid:
            yield records_to_batch(self._records(body, base, source), source, from_text=False)
            return
        for batch in table.select(wanted).to_batches(max_chunksize=source.config.batch_size or MAX_AUTO_BATCH_ROWS):
            yield with_null_corrupt_column(batch, source)

    @staticmethod
    def _records(body: bytes, base: int, source: SegmentInput) -> list[RawRecord]:
        line_base = 0 if base == 0 else None
        records: list[RawRecord] = []
        for index, offset, raw in lines_with_offsets(body):
            if not raw.strip():
                continue
            where = location(byte_offset=base + offset, line=None if line_base is None else index + 1)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                records.append(RawRecord(values=None, text=raw.decode("utf-8", errors="replace"), where=where,
                                         parse_error=f"not valid UTF-8 ({exc.reason} at column {exc.start + 1})"))
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                records.append(RawRecord(values=None, text=text, where=where, parse_error=f"invalid JSON: {exc}"))
                continue
            if not isinstance(value, dict):
                records.append(RawRecord(values=None, text=text, where=where,
                                         parse_error=f"expected a JSON object, found {type(value).__name__}"))
                continue
            records.append(RawRecord(values=value, text=text, where=where))
        return records
