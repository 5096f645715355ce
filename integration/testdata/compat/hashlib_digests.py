"""hashlib and hmac: OpenSSL and built-in digests, key derivation."""
import hashlib
import hmac

data = b"rljail compatibility corpus" * 100
for name in ["md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3_256", "blake2b", "blake2s"]:
    print(name, hashlib.new(name, data).hexdigest())
print("shake_128", hashlib.shake_128(data).hexdigest(16))
print("pbkdf2", hashlib.pbkdf2_hmac("sha256", b"password", b"salt", 1000).hex())
print("scrypt", hashlib.scrypt(b"password", salt=b"salt", n=1024, r=8, p=1, dklen=32).hex())
print("hmac", hmac.new(b"key", data, "sha256").hexdigest())
h = hashlib.sha256()
for i in range(1000):
    h.update(str(i).encode())
print("incremental", h.hexdigest())
print("guaranteed", sorted(hashlib.algorithms_guaranteed))
