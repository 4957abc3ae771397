/**
 * One typed error hierarchy. Every error of the SDK is an {@link OnesidedError} with a `code` and,
 * where a field is at fault, its path (`field`). `report()` never throws these into the app for
 * anything the environment causes; they reach the app only from the calls documented to throw
 * them (construction with bad options, `strict: true`).
 */

export class OnesidedError extends Error {
  readonly code: string;
  readonly field: string | null;

  constructor(code: string, field: string | null, detail: string) {
    super(field ? `${field}: ${detail}` : detail);
    this.name = new.target.name;
    this.code = code;
    this.field = field;
  }
}

/** A value the caller passed (a metric's parameter, a report's value, an option) is not valid. */
export class ParameterError extends OnesidedError {
  constructor(field: string, detail: string) {
    super("invalid_parameter", field, detail);
  }
}

/** A signed document (config, round announcement) does not verify or is malformed. */
export class SignatureError extends OnesidedError {
  constructor(field: string, detail: string) {
    super("bad_signature", field, detail);
  }
}

/** An answer of the server does not follow the wire format. */
export class ProtocolError extends OnesidedError {
  constructor(field: string | null, detail: string) {
    super("invalid_message", field, detail);
  }
}

/** The privacy policy refuses the report (the window's value is already released, a round cannot be followed). */
export class PolicyError extends OnesidedError {
  constructor(field: string, detail: string) {
    super("policy", field, detail);
  }
}

/** The report would pass the privacy ceiling. */
export class BudgetExceeded extends OnesidedError {
  readonly requested: number;
  readonly remaining: number;

  constructor(requested: number, remaining: number, detail: string) {
    super("budget_exceeded", "epsilon", detail);
    this.requested = requested;
    this.remaining = remaining;
  }
}

/** This client cannot prove the charge the reference client makes for a chain: it refuses it. */
export class ChargeUnproven extends OnesidedError {
  constructor(detail: string) {
    super("charge_unproven", "levels", detail);
  }
}

/** A level below the one already released (released data cannot be revoked). */
export class TighteningRefused extends OnesidedError {
  readonly current: number;
  readonly requested: number;

  constructor(current: number, requested: number) {
    super("tightening_refused", "level", `cannot go from level ${current} down to ${requested}`);
    this.current = current;
    this.requested = requested;
  }
}

/** The network or the server failed (the sender retries these). */
export class TransportError extends OnesidedError {
  readonly status: number | null;

  constructor(detail: string, status: number | null = null) {
    super("transport", null, detail);
    this.status = status;
  }
}

/** The storage adapter failed (the client goes on in memory and says so by an event). */
export class StorageError extends OnesidedError {
  constructor(detail: string) {
    super("storage", null, detail);
  }
}
