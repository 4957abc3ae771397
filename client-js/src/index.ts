export * from "./errors.js";
export { b64d, b64e, fromHex, toHex } from "./bytes.js";
export { canonicalJson, floatRepr, JsonFloat, parseJson, plain } from "./json.js";
export type { Json } from "./json.js";
export { bloomBits, canonicalValue, membersOfCanonical, murmur3, prefixOf } from "./encodings.js";
export type { Encoding, Value } from "./encodings.js";
export { metricParams, paramsDigest, withIrr } from "./params.js";
export type { Irr, MetricParams, Mode } from "./params.js";
export { keyedUniforms, memoizedNoise, noiseKey, noiseSeed, permanentBits, relaxExponential, relaxLaplace } from "./noise.js";
export { bernoulliChoose, Rational } from "./exact.js";
export { applyIrr, irrGarbling, irrStepConditionals, relaxInstantaneous } from "./irr.js";
export { encodeValue, packBits, payloadHeader, relaxedPayload, reportPayload, unpackBits } from "./report.js";
export type { WindowValue } from "./report.js";
export {
  buildReport, encodeBatchBinary, encodeBatchJson, ephemeralKey, parseUploadResponse, reportAad, seal,
  sealedReportId, sealingKey, windowStart,
} from "./wire.js";
export type { Envelope, ReportResult, UploadAnswer } from "./wire.js";
export { keyFor, keyId, verifyConfig, verifyDocument } from "./config.js";
export type { Config, MetricEntry, RoundAnnouncement } from "./config.js";
export { secureRandom, wordsToUniforms } from "./random.js";
export type { RandomSource } from "./random.js";
export {
  bitsChanged, budgetOf, chargeNewWindow, chargeRelaxation, microCeil, newRecord, resendRelaxed, settle, windowMicro,
} from "./ledger.js";
export { enclosedExp, enclosedLog, enclosedSequenceEpsilon, nextDown, nextUp } from "./interval.js";
export { enclosedReportChainEpsilon } from "./reportchain.js";
export type { Budget, Ceiling, MetricRecord, WindowRelease } from "./ledger.js";
export { Client } from "./client.js";
export type { ClientEvent, ClientOptions, EventType, Logger, ReportOutcome, ReportStatus } from "./client.js";
export { IndexedDBStorage, MemoryStorage } from "./storage.js";
export type { BlobName, StorageAdapter } from "./storage.js";
