"""onesided client SDK: on-device encoding, memoized randomization, ledger, sealed transport."""
