"""Versioned, validated wire schemas (the layouts are specified in ``docs/wire.md``), one module a job.

Every name below is importable from ``protocol.wire`` itself, as before the package split.

* Report payload (the plaintext, :mod:`.payload`): ``u8 version || u16be cohort || f64be level
  || bits packed LSB-first`` (:func:`pack_payload`, :func:`unpack_payload`).
* Report envelope (:mod:`.envelope`, with sealing and opening): clear
  metadata (``report_id``, ``metric``, ``round``, ``window``,
  ``params_digest``) plus a sealed or plain payload, whose AAD binds the
  metadata (:func:`report_aad`).
* Batches (:mod:`.batch`): JSON (:func:`parse_batch_json`) and binary
  ``application/vnd.onesided.batch`` (:func:`parse_batch_binary`).
* Per-report results (:class:`ReportResult`) and the upload response (:mod:`.results`).
* The signed config and round announcements (:mod:`.config`: :func:`verify_config`,
  :func:`validate_round_announcement`).
* Versions, limits, statuses and the small validators they share: :mod:`.common`.

Every violation raises :class:`~protocol.errors.ReportRejected` whose
``field`` is a path such as ``reports[3].report_id`` or ``payload.cohort``.

>>> import numpy as np
>>> p = ReportPayload(cohort=3, level=1.5, bits=np.array([1, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool))
>>> pack_payload(p).hex()
'0100033ff80000000000000101'
>>> unpack_payload(pack_payload(p), num_bits=9, num_cohorts=4) == p
True
"""

from .batch import encode_batch_binary, encode_batch_json, parse_batch_binary, parse_batch_json
from .common import (
    ANSWER_VERSION,
    BATCH_MAGIC,
    BODY_PLAIN,
    BODY_SEALED,
    CLIPPED_ANSWERS_VERSION,
    CLOCK_ANSWERS_VERSION,
    CLOCK_STATUSES,
    CODE_DUPLICATE_REPORT_ID,
    CODE_TOO_MANY_REPORTS,
    CONFIG_VERSION,
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    DIGEST_BYTES,
    MAX_BODY_BYTES,
    MAX_COHORT,
    MAX_RETRY_AFTER,
    MAX_ROUND,
    MAX_WINDOW,
    PAYLOAD_HEADER,
    PAYLOAD_VERSION,
    REPORT_AAD_LABEL,
    REPORT_ID_BYTES,
    ROUND_VERSION,
    STATUS_ACCEPTED,
    STATUS_DECRYPT_ERROR,
    STATUS_EXPIRED,
    STATUS_INVALID_MESSAGE,
    STATUS_OUTDATED_CONFIG,
    STATUS_REPLAYED,
    STATUS_TOO_EARLY,
    STATUS_UNKNOWN_METRIC,
    STATUSES,
    WIRE_HEADER,
    WIRE_VERSION,
    BoolArray,
    answer_version,
    window_start,
)
from .config import (
    ROUND_FIELDS,
    ROUND_IRR_FIELDS,
    SYNC_INTERVAL_RANGE,
    AggregatorInfo,
    ConfigPayload,
    MetricEntry,
    RoundAnnouncement,
    build_config_payload,
    validate_config_payload,
    validate_round_announcement,
    verify_config,
)
from .envelope import (
    REPORT_ID_LABEL,
    ReportEnvelope,
    build_report,
    check_report_id,
    open_report,
    report_aad,
    seal_report,
    sealed_report_id,
)
from .payload import (
    PayloadCheck,
    ReportPayload,
    pack_payload,
    pack_payload_mask,
    payload_header,
    payload_size,
    unpack_payload,
)
from .results import (
    ReportResult,
    UploadResults,
    parse_upload_response,
    upload_response,
    upload_server_time,
)

__all__ = [
    "AggregatorInfo",
    "BATCH_MAGIC",
    "BODY_PLAIN",
    "BODY_SEALED",
    "BoolArray",
    "ANSWER_VERSION",
    "CLIPPED_ANSWERS_VERSION",
    "CLOCK_ANSWERS_VERSION",
    "CLOCK_STATUSES",
    "CODE_DUPLICATE_REPORT_ID",
    "CODE_TOO_MANY_REPORTS",
    "CONFIG_VERSION",
    "CONTENT_TYPE_BINARY",
    "CONTENT_TYPE_JSON",
    "ConfigPayload",
    "DIGEST_BYTES",
    "MAX_BODY_BYTES",
    "MAX_COHORT",
    "MAX_RETRY_AFTER",
    "MAX_ROUND",
    "MAX_WINDOW",
    "MetricEntry",
    "PAYLOAD_HEADER",
    "PAYLOAD_VERSION",
    "PayloadCheck",
    "REPORT_AAD_LABEL",
    "REPORT_ID_BYTES",
    "REPORT_ID_LABEL",
    "ROUND_FIELDS",
    "ROUND_IRR_FIELDS",
    "ROUND_VERSION",
    "ReportEnvelope",
    "ReportPayload",
    "ReportResult",
    "UploadResults",
    "RoundAnnouncement",
    "STATUSES",
    "STATUS_ACCEPTED",
    "STATUS_DECRYPT_ERROR",
    "STATUS_EXPIRED",
    "STATUS_INVALID_MESSAGE",
    "STATUS_OUTDATED_CONFIG",
    "STATUS_REPLAYED",
    "STATUS_TOO_EARLY",
    "STATUS_UNKNOWN_METRIC",
    "SYNC_INTERVAL_RANGE",
    "WIRE_HEADER",
    "WIRE_VERSION",
    "answer_version",
    "build_config_payload",
    "build_report",
    "check_report_id",
    "encode_batch_binary",
    "encode_batch_json",
    "open_report",
    "pack_payload",
    "pack_payload_mask",
    "parse_batch_binary",
    "parse_batch_json",
    "parse_upload_response",
    "payload_header",
    "payload_size",
    "report_aad",
    "seal_report",
    "sealed_report_id",
    "unpack_payload",
    "upload_response",
    "upload_server_time",
    "validate_config_payload",
    "validate_round_announcement",
    "verify_config",
    "window_start",
]
