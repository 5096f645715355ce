"""decimal, fractions, math, statistics, random with a seed."""
import decimal
import fractions
import math
import random
import statistics
from decimal import Decimal

decimal.getcontext().prec = 50
print("sqrt2", Decimal(2).sqrt())
print("div", Decimal(1) / Decimal(7))
with decimal.localcontext() as ctx:
    ctx.prec = 5
    ctx.rounding = decimal.ROUND_HALF_EVEN
    print("rounded", Decimal("2.675").quantize(Decimal("0.01")), +Decimal("3.14159265"))
print("exp", Decimal(1).exp())
print("ln", Decimal(10).ln())
try:
    Decimal(1) / Decimal(0)
except decimal.DivisionByZero:
    print("division by zero trapped")
print("fraction", fractions.Fraction(3, 4) + fractions.Fraction(1, 6))
print("math", math.factorial(30), math.gcd(2 ** 40, 6 ** 20), math.isqrt(10 ** 30))
print("float", repr(math.pi), math.fsum([0.1] * 10), math.comb(50, 25))
random.seed(12345)
print("random", [random.randint(0, 100) for _ in range(5)], round(random.random(), 12))
print("stats", statistics.mean([1, 2, 3, 4]), statistics.median([5, 1, 3]), statistics.stdev([1, 2, 3, 4]))
