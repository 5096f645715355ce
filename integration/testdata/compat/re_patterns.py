"""re: matching, groups, substitution, flags, unicode."""
import re

text = "alice@example.com, bob.smith@test.org; carol+tag@sub.example.net"
emails = re.findall(r"[\w.+-]+@([\w-]+\.)+[a-z]+", text)
print("findall groups", emails)
print("finditer", [m.group(0) for m in re.finditer(r"[\w.+-]+@[\w.-]+", text)])
m = re.match(r"(?P<user>\w+)@(?P<host>[\w.]+)", text)
print("named", m.groupdict(), m.span())
print("sub", re.sub(r"(\w+)@", lambda m: m.group(1).upper() + " at ", text))
print("split", re.split(r"[,;]\s*", text))
print("ignorecase", bool(re.search("ALICE", text, re.I)))
print("multiline", re.findall(r"^\w+", "one\ntwo\nthree", re.M))
print("verbose", re.fullmatch(r"""
    (\d{4})  # year
    -(\d{2}) # month
    -(\d{2}) # day
""", "2024-02-29", re.X).groups())
print("unicode", re.findall(r"\w+", "naïve café Ωμέγα"))
print("lookaround", re.findall(r"(?<=\$)\d+(?=\.)", "$10. $200. 30."))
print("backref", re.sub(r"\b(\w+) \1\b", r"\1", "the the cat sat sat down"))
print("escape", re.escape("a.b*c"))
big = "ab" * 100000
print("big", len(re.findall("ab", big)))
