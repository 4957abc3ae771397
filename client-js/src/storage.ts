/**
 * Where the client keeps its state (secret, ledger, config, queue): an adapter of named blobs,
 * encrypted with AES-GCM under a state key (`nonce(12) || AES-GCM(key, nonce, json, label)`).
 *
 * Adapters: {@link MemoryStorage} (tests; nothing survives), {@link IndexedDBStorage} (browsers;
 * the key is a non-extractable Web Crypto key kept in the same database), the Node/Electron file
 * adapter in `onesided-client/node`, or your own (React Native: AsyncStorage or MMKV for blobs,
 * and pass `stateKey` from the Keychain/Keystore).
 */

import { concat, utf8 } from "./bytes.js";
import { StorageError } from "./errors.js";
import { own } from "./wire.js";

export type BlobName = "state" | "key";

export interface StorageAdapter {
  /** The blob stored under `name`, or null when there is none. */
  read(name: BlobName): Promise<Uint8Array | null>;
  /** Store `data` under `name`, replacing it whole (a crash leaves the old or the new blob). */
  write(name: BlobName, data: Uint8Array): Promise<void>;
  /** Optional: the state key, kept by the platform (IndexedDB keeps a non-extractable CryptoKey). */
  stateKey?(): Promise<CryptoKey>;
}

export class MemoryStorage implements StorageAdapter {
  private readonly blobs = new Map<BlobName, Uint8Array>();

  async read(name: BlobName): Promise<Uint8Array | null> {
    return this.blobs.get(name)?.slice() ?? null;
  }

  async write(name: BlobName, data: Uint8Array): Promise<void> {
    this.blobs.set(name, data.slice());
  }
}

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** IndexedDB (browsers): database `name`, one object store; the state key never leaves Web Crypto. */
export class IndexedDBStorage implements StorageAdapter {
  private db: Promise<IDBDatabase> | null = null;

  constructor(private readonly name = "onesided") {}

  private open(): Promise<IDBDatabase> {
    if (!this.db) {
      const r = indexedDB.open(this.name, 1);
      r.onupgradeneeded = () => r.result.createObjectStore("blobs");
      this.db = request(r);
    }
    return this.db;
  }

  private async store(mode: IDBTransactionMode): Promise<IDBObjectStore> {
    return (await this.open()).transaction("blobs", mode).objectStore("blobs");
  }

  async read(name: BlobName): Promise<Uint8Array | null> {
    const v = await request((await this.store("readonly")).get(name));
    return v instanceof Uint8Array ? v : null;
  }

  async write(name: BlobName, data: Uint8Array): Promise<void> {
    await request((await this.store("readwrite")).put(data, name));
  }

  async stateKey(): Promise<CryptoKey> {
    const found = await request((await this.store("readonly")).get("cryptokey"));
    if (found) return found as CryptoKey;
    const key = await crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"]);
    await request((await this.store("readwrite")).put(key, "cryptokey"));
    return key;
  }
}

const LABEL = utf8("onesided/client-js/state/v1");

/** Encrypts and decrypts the state blob with the key from the options, the adapter, or a stored key blob. */
export class StateBox {
  private key: Promise<CryptoKey> | null = null;

  constructor(private readonly storage: StorageAdapter, private readonly rawKey: Uint8Array | null,
              private readonly randomBytes: (n: number) => Uint8Array) {}

  private async loadKey(): Promise<CryptoKey> {
    const subtle = crypto.subtle;
    const usage: KeyUsage[] = ["encrypt", "decrypt"];
    if (this.rawKey) return subtle.importKey("raw", own(this.rawKey), "AES-GCM", false, usage);
    if (this.storage.stateKey) return this.storage.stateKey();
    let raw = await this.storage.read("key");
    if (!raw || (raw.length !== 16 && raw.length !== 32)) {
      if (raw) throw new StorageError("the stored state key is not 16 or 32 bytes");
      raw = this.randomBytes(32);
      await this.storage.write("key", raw);
    }
    return subtle.importKey("raw", own(raw), "AES-GCM", false, usage);
  }

  private cryptoKey(): Promise<CryptoKey> {
    if (!this.key) this.key = this.loadKey().catch((e) => {
      this.key = null;
      throw e;
    });
    return this.key;
  }

  async load(): Promise<string | null> {
    const blob = await this.storage.read("state");
    if (!blob) return null;
    if (blob.length < 28) throw new StorageError("the state blob is truncated");
    try {
      const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: own(blob.slice(0, 12)), additionalData: own(LABEL) },
        await this.cryptoKey(), own(blob.slice(12)));
      return new TextDecoder().decode(plain);
    } catch (e) {
      if (e instanceof StorageError) throw e;
      throw new StorageError("the state does not decrypt (another key, or a damaged blob)");
    }
  }

  async save(text: string): Promise<void> {
    const nonce = this.randomBytes(12);
    const sealed = await crypto.subtle.encrypt({ name: "AES-GCM", iv: own(nonce), additionalData: own(LABEL) },
      await this.cryptoKey(), own(utf8(text)));
    await this.storage.write("state", concat(nonce, new Uint8Array(sealed)));
  }
}
