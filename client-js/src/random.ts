/**
 * The one randomness interface, injected: uniforms strictly inside (0, 1) and bytes. The default
 * reads the platform CSPRNG (`crypto.getRandomValues`) and maps 64-bit words to uniforms as the
 * keyed streams do (`((w >> 12) + 0.5) / 2^52`); tests replay recorded draws.
 */

export interface RandomSource {
  uniforms(n: number): Float64Array;
  bytes(n: number): Uint8Array;
}

const TWO52 = 2 ** 52;

/** The uniforms of little-endian 64-bit words: `((w >> 12) + 0.5) / 2^52` (docs/wire.md 3), exact. */
export function wordsToUniforms(stream: Uint8Array, n: number): Float64Array {
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const lo = view.getUint32(8 * i, true);
    const hi = view.getUint32(8 * i + 4, true);
    out[i] = (hi * 2 ** 20 + (lo >>> 12) + 0.5) / TWO52;
  }
  return out;
}

function cryptoBytes(n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let at = 0; at < n; at += 65536) {
    globalThis.crypto.getRandomValues(out.subarray(at, Math.min(n, at + 65536)));
  }
  return out;
}

export const secureRandom: RandomSource = {
  uniforms: (n) => wordsToUniforms(cryptoBytes(8 * n), n),
  bytes: cryptoBytes,
};
