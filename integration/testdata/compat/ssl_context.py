"""ssl: a default client context, a server context, and a client handshake start through memory BIOs."""
import ssl

ctx = ssl.create_default_context()
print("protocol", ctx.protocol.name)
print("verify", ctx.verify_mode.name, ctx.check_hostname)
print("minimum", ctx.minimum_version.name)
srv = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
print("server verify", srv.verify_mode.name)
incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
obj = ctx.wrap_bio(incoming, outgoing, server_hostname="example.invalid")
try:
    obj.do_handshake()
except ssl.SSLWantReadError:
    hello = outgoing.read()
    print("client hello", len(hello) > 100, hello[0] == 0x16)
print("has tls1.3", ssl.HAS_TLSv1_3)
print("ciphers", len(ctx.get_ciphers()) > 0)
print("rand", len(ssl.RAND_bytes(16)))
