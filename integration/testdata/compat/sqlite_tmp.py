"""sqlite3: a database file in /tmp, WAL journal, transactions, a user function."""
import os
import sqlite3
import tempfile

d = tempfile.mkdtemp()
path = os.path.join(d, "test.db")
con = sqlite3.connect(path)
print("journal", con.execute("PRAGMA journal_mode=WAL").fetchone()[0])
con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL)")
with con:
    con.executemany("INSERT INTO t (name, score) VALUES (?, ?)", [(f"n{i}", i * 1.5) for i in range(100)])
try:
    with con:
        con.execute("INSERT INTO t (name, score) VALUES ('x', 1)")
        raise RuntimeError("rollback")
except RuntimeError:
    pass
print("count", con.execute("SELECT COUNT(*) FROM t").fetchone()[0])
print("sum", con.execute("SELECT SUM(score) FROM t").fetchone()[0])
con.create_function("rev", 1, lambda s: s[::-1])
print("function", con.execute("SELECT rev(name) FROM t WHERE id = 42").fetchone()[0])
con2 = sqlite3.connect(path)
print("second connection", con2.execute("SELECT name FROM t ORDER BY id DESC LIMIT 1").fetchone()[0])
con2.close()
con.execute("CREATE INDEX i ON t (score)")
con.execute("VACUUM")
print("integrity", con.execute("PRAGMA integrity_check").fetchone()[0])
con.close()
mem = sqlite3.connect(":memory:")
print("memory", mem.execute("SELECT sqlite_version() = ?", (sqlite3.sqlite_version,)).fetchone()[0])
for f in os.listdir(d):
    os.unlink(os.path.join(d, f))
os.rmdir(d)
