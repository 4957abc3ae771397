/**
 * JSON that keeps the spelling of numbers, and canonical JSON (docs/wire.md 1.2).
 *
 * `JSON.parse` turns `2.0` into `2`, but the signed text of a document depends on it: a
 * signature covers `canonical_json(payload)`, where a float always shows a `.` or an exponent.
 * {@link parseJson} keeps floats as {@link JsonFloat} so {@link canonicalJson} writes back the
 * exact text the signer hashed.
 */

import { ParameterError } from "./errors.js";

/** A JSON number written with a `.` or an exponent (a float in the reference implementation). */
export class JsonFloat {
  constructor(readonly value: number) {}
}

export type Json = null | boolean | string | number | bigint | JsonFloat | Json[] | { [key: string]: Json };

/** Python's `repr` of a finite double: shortest round-trip digits, positional for 1e-4 <= |x| < 1e16. */
export function floatRepr(x: number): string {
  if (!Number.isFinite(x)) throw new ParameterError("value", "NaN and infinities are not allowed");
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mantissa, expText] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exp = parseInt(expText, 10);
  const sign = x < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
    const whole = digits.length > exp + 1 ? digits.slice(0, exp + 1) : digits.padEnd(exp + 1, "0");
    const frac = digits.length > exp + 1 ? digits.slice(exp + 1) : "0";
    return `${sign}${whole}.${frac}`;
  }
  const lead = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const e = Math.abs(exp).toString().padStart(2, "0");
  return `${sign}${lead}e${exp < 0 ? "-" : "+"}${e}`;
}

function quote(text: string): string {
  let out = '"';
  for (const ch of text) {
    const c = ch.codePointAt(0) as number;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

/** Keys by Unicode code point (not UTF-16 units, JavaScript's default order). */
function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0) as number);
  const y = Array.from(b, (c) => c.codePointAt(0) as number);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** `canonical_json(x)`: sorted keys, no whitespace, Python's float spelling. */
export function canonicalJson(x: Json): string {
  if (x === null) return "null";
  if (x === true) return "true";
  if (x === false) return "false";
  if (typeof x === "string") return quote(x);
  if (typeof x === "bigint") return x.toString();
  if (typeof x === "number") {
    if (!Number.isSafeInteger(x)) throw new ParameterError("value", `${x} is not an integer; wrap floats in JsonFloat`);
    return x.toString();
  }
  if (x instanceof JsonFloat) return floatRepr(x.value);
  if (Array.isArray(x)) return "[" + x.map(canonicalJson).join(",") + "]";
  const keys = Object.keys(x).sort(byCodePoint);
  return "{" + keys.map((k) => quote(k) + ":" + canonicalJson(x[k])).join(",") + "}";
}

/** A JSON value as plain JavaScript (floats as numbers, integers as numbers). */
export function plain(x: Json): unknown {
  if (x instanceof JsonFloat) return x.value;
  if (typeof x === "bigint") return Number(x);
  if (Array.isArray(x)) return x.map(plain);
  if (x !== null && typeof x === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(x)) out[k] = plain(v);
    return out;
  }
  return x;
}

/** Parse JSON text keeping number spellings: integers as numbers (bigint past 2^53), floats as JsonFloat. */
export function parseJson(text: string): Json {
  let at = 0;
  const fail = (what: string): never => {
    throw new ParameterError("json", `${what} at offset ${at}`);
  };
  const ws = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at++;
  };
  const value = (depth: number): Json => {
    if (depth > 64) fail("nested too deeply");
    ws();
    const ch = text[at];
    if (ch === "{") {
      at++;
      const out: { [key: string]: Json } = Object.create(null);
      ws();
      if (text[at] === "}") {
        at++;
        return { ...out };
      }
      for (;;) {
        ws();
        if (text[at] !== '"') fail("expected a key");
        const key = str();
        ws();
        if (text[at++] !== ":") fail("expected ':'");
        if (key in out) fail(`repeated key ${key}`);
        out[key] = value(depth + 1);
        ws();
        const sep = text[at++];
        if (sep === "}") return { ...out };
        if (sep !== ",") fail("expected ',' or '}'");
      }
    }
    if (ch === "[") {
      at++;
      const out: Json[] = [];
      ws();
      if (text[at] === "]") {
        at++;
        return out;
      }
      for (;;) {
        out.push(value(depth + 1));
        ws();
        const sep = text[at++];
        if (sep === "]") return out;
        if (sep !== ",") fail("expected ',' or ']'");
      }
    }
    if (ch === '"') return str();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return v;
      }
    }
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(at, at + 400));
    if (!m) return fail("unexpected character");
    at += m[0].length;
    if (m[2] || m[3]) return new JsonFloat(Number(m[0]));
    const n = Number(m[0]);
    return Number.isSafeInteger(n) ? n : BigInt(m[0]);
  };
  const str = (): string => {
    const start = at;
    at++;
    let simple = true;
    while (at < text.length && text[at] !== '"') {
      if (text[at] === "\\") {
        simple = false;
        at++;
      }
      at++;
    }
    if (at >= text.length) fail("unterminated string");
    at++;
    const raw = text.slice(start, at);
    return simple ? raw.slice(1, -1) : (JSON.parse(raw) as string);
  };
  const out = value(0);
  ws();
  if (at !== text.length) fail("trailing characters");
  return out;
}
