"""json: encode, decode, custom encoders, streaming, errors."""
import json
from collections import OrderedDict
from decimal import Decimal

doc = {"name": "rljail", "list": [1, 2.5, None, True, False], "nested": {"a": {"b": ["c", {"d": "é✓"}]}},
       "big": 2 ** 70, "float": 1e-7}
s = json.dumps(doc, sort_keys=True)
print(s)
print("roundtrip", json.loads(s) == doc)
print("pretty", json.dumps(doc["nested"], indent=2, ensure_ascii=False))
print("decimal", json.loads("1.10", parse_float=Decimal))
print("ordered", list(json.loads('{"z": 1, "a": 2}', object_pairs_hook=OrderedDict)))


class Enc(json.JSONEncoder):
    def default(self, o):
        if isinstance(o, set):
            return sorted(o)
        return super().default(o)


print("encoder", json.dumps({"s": {3, 1, 2}}, cls=Enc))
try:
    json.loads('{"a": }')
except json.JSONDecodeError as e:
    print("error", e.msg, e.lineno, e.colno)
dec = json.JSONDecoder()
obj, end = dec.raw_decode('[1, 2] trailing')
print("raw_decode", obj, end)
print("large", len(json.dumps(list(range(100000)))))
