"""Physical units with ``pint``: normalise answer strings, split value and unit, compare units.

Answer strings come in many spellings (``7.55N``, ``46.3 kN``, ``1.54 \\text{ m/s}^2``, ``\\( 22.3^{\\circ} \\)``,
``3.2 \\times 10^{-19} J``, ``5 kΩ``, ``5 μF``, ``J/kg K``, ``m s-1``, ``(kg)(m/s^2)``, ``6.6e-34 Js``).
Everything here normalises first (:func:`normalise_unit_text`), then asks the project's one pint
registry (:func:`registry`); a string that cannot be read, or that is ambiguous, gives ``None``, never an
exception and never a guess.

The registry is pint's default definitions with two changes and a few additions, as physicists count:

- **angles are a dimension**: ``radian = [angle]``, a turn (``revolution``, ``rev``, ``cycle``) is 2 pi
  rad, and ``hertz = cycle / second``. So ``60 rpm`` is ``1 Hz``, ``1 rad/s`` is ``1/(2 pi) Hz`` and the
  strict unit match says ``rad/s`` is not ``Hz`` (stock pint sets the radian to 1: ``1 rad/s == 1 Hz``).
  A unit without an angle (``s^-1``, ``Bq``) is read in the other side's angle unit when compared
  with one that has it (``s^-1`` is ``Hz`` against ``Hz`` and ``rad/s`` against ``rad/s``, as
  physicists write both); a bare number against an angle stays ambiguous (degrees or radians?).
- **added**: ``diopter`` (``dpt``, ``dioptre``), ``rev``, and the written-together products ``Js``,
  ``Nm`` (a newton metre, no longer the textile yarn count), ``Ns``, ``Ws``.
- **refused**: a unit that pint can only read through a physical constant (``k`` is Boltzmann's
  constant, ``c`` the speed of light: ``\\hat{k}`` or a symbolic answer is not a unit), and text that is
  symbolic (Greek letters, functions, subscripts, numbers that are not exponents).
- **ambiguous alone, read in context**: ``ms`` (``kms``) right before a negative power, as physicists write
  ``9.8 ms^-2`` for metres per second squared, which pint would read as per millisecond squared. Alone it is
  refused (:func:`parse_unit` gives ``None``); compared with another unit (:func:`convert`, :func:`same_unit`) the
  reading with that unit's dimension is taken (:func:`unit_readings`), so ``9.8 ms^-2`` equals ``9.8 m/s^2``.
- **temperature differences**: ``Δ°C`` (``\\Delta ^{\\circ}C``), the old ``C°`` and ``°C`` inside a compound unit
  are kelvin-sized differences; ``deg C`` / ``degrees Celsius`` are degrees Celsius, never coulomb degrees.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import pint

_PATCHES = {"radian = [] = rad": "radian = [angle] = rad", "hertz = 1 / second = Hz": "hertz = turn / second = Hz",
            "number_meter = kilometer / kilogram = Nm": "number_meter = kilometer / kilogram"}  # Nm: newton metre
_DEFINITIONS = ("diopter = 1 / meter = dpt = dioptre", "rev = turn", "joule_second = joule * second = Js",
                "newton_meter = newton * meter = Nm", "newton_second = newton * second = Ns",
                "watt_second = watt * second = Ws")


@functools.lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    """The one pint registry of the project: pint's own definitions with angles as a dimension, hertz as
    cycles per second, and the additions above (offset units allowed in conversions)."""
    folder = Path(pint.__file__).parent
    text = (folder / "default_en.txt").read_text(encoding="utf-8")
    text = text.replace("@import constants_en.txt", (folder / "constants_en.txt").read_text(encoding="utf-8"))
    for old, new in _PATCHES.items():
        if old not in text:
            raise RuntimeError(f"pint {pint.__version__}'s definitions lack {old!r}; update lit_grpo.tasks.phyx.units._PATCHES")
        text = text.replace(old, new)
    ureg = pint.UnitRegistry(None, autoconvert_offset_to_baseunit=True)
    ureg.load_definitions(text.splitlines())
    for line in _DEFINITIONS:
        ureg.define(line)
    return ureg


@functools.lru_cache(maxsize=1)
def _constants() -> frozenset[str]:
    """Names of pint's physical constants (``boltzmann_constant``, ``speed_of_light``, ...): never a unit."""
    text = (Path(pint.__file__).parent / "constants_en.txt").read_text(encoding="utf-8")
    return frozenset(m.group(1) for m in re.finditer(r"^([A-Za-z_]\w*)\s*=", text, re.MULTILINE))


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_MARKUP = r"\\(?:text|mathrm|rm|operatorname|mathit|mathbf|textrm|mbox)\s*\{([^{}]*)\}"
_REPLACEMENTS = [  # (pattern, replacement), applied in order to unit text
    (r"\\(?:hat|vec|mathbf)\s*\{\s*\\?(?:hat\s*\{)?[ijkxyzn]\s*\}?\s*\}|\\hat\s*[ijkxyzn]\b", " "),  # unit vectors
    (r"\\[,;:! ]|~|\\left|\\right|\\\(|\\\)|\\\[|\\\]|\$|\\+\s*$", " "),
    (r"(?:Δ|\\Delta\b)\s*(?:\{\s*\})?\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°)\s*([CF])\b|\b([CF])\s*°", r" delta_deg\1\2 "),
    (r"(?:Δ|\\Delta\b)\s*K\b", " K "),
    (r"\bdeg(?:ree)?s?\.?\s*(?:C\b|Celsius\b)", " degC "),
    (r"\bdeg(?:ree)?s?\.?\s*(?:F\b|Fahrenheit\b)", " degF "),
    (r"\^\s*\{\s*\\circ\s*\}\s*C\b|°\s*C\b|℃", " degC "),
    (r"\^\s*\{\s*\\circ\s*\}\s*F\b|°\s*F\b|℉", " degF "),
    (r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree", " degree "),
    ("[\u2126\u03a9]|\\\\Omega\\b", "ohm"),  # glued to its prefix: kΩ -> kohm (kilo-ohm), never k * ohm
    (r"\\mu\s*|[μµ]", "u"),
    (r"\\AA|Å", " angstrom "),
    (r"\\%|%", " percent "),
    (r"\\cdot|·|⋅|×|\\times|(?<!\*)\*(?!\*)", " * "),
    (r"\^\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}|\^\s*\(\s*([-+]?\d+(?:\.\d+)?)\s*\)|\^\s*([-+]?\d+(?:\.\d+)?)",
     lambda m: "**" + next(g for g in m.groups() if g)),
    (r"(?<=[A-Za-z])([-+]?\d+)(?=$|[\s/*)])", r"**\1"),  # caret-less exponents: s-1, m2, m/s2
    (r"\)\s*\(", ")*("),
]
_WORDS = {"percent": "percent", "degrees": "degree", "deg": "degree", "revs": "rev"}
_SYMBOLIC = re.compile(r"\\(?!(?:text|mathrm|rm|operatorname|mathit|mathbf|textrm|mbox|mu|Omega|circ|degree|cdot|"
                       r"times|AA|left|right|frac|hat|vec|%|[,;:! ()\[\]]|Delta\s*(?:\{\s*\})?\s*\^))[A-Za-z]+|_|=|\b(?:sin|cos|tan|sqrt|ln|log|"
                       r"exp)\b")


def _power_of_superscripts(text: str) -> str:
    return re.sub(r"([⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)", lambda m: "^{" + m.group(1).translate(_SUPERSCRIPTS) + "}", text)


_MARKUP_OPEN = re.compile(r"\\(?:text|mathrm|rm|operatorname|mathit|mathbf|textrm|mbox)\s*\{")


def _strip_markup(text: str) -> str:
    """Each ``\\text{..}`` / ``\\mathrm{..}`` / ... replaced by its content, nested braces included
    (``\\mathrm{m\\,s^{-1}}`` -> ``m\\,s^{-1}``); an unbalanced brace leaves the rest as it is."""
    out, i = [], 0
    while (m := _MARKUP_OPEN.search(text, i)) is not None:
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            break
        out += [text[i:m.start()], text[m.end():j - 1]]
        i = j
    return "".join(out) + text[i:]


def _unwrap(text: str) -> str:
    """``\\text{..}`` and friends unwrapped, ``\\frac{a}{b}`` -> ``(a)/(b)``, innermost first."""
    prev = None
    while prev != text:
        prev = text
        text = _strip_markup(text)
        text = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", text)
    return text


SPELLINGS = {  # other standard spellings (IEC 80000, ISO 80000, NIST SP 811, textbooks) -> a name pint reads
    "r/min": "rpm", "r/s": "rps", "r.p.m.": "rpm", "RPM": "rpm", "r.p.s.": "rps", "RPS": "rps",  # rotational speed
    "′": "arcminute", "″": "arcsecond",  # angles (the prime and double prime)
    "c/s": "Hz",  # cycles per second
    "mm Hg": "mmHg", "Torr": "torr", "atm": "atm",  # pressure (atm: a unit, though pint lists it as a constant)
    "AU": "au",  # astronomical unit (pint's AU is the absorbance unit)
    "kmph": "km/h",  # (pint: kilo-mile per hour)
    "℧": "siemens",  # the mho sign
    "kgm/s": "kg*m/s", "kgm": "kg*m",  # momentum written without a separator
}
"""Unit spellings read as another; each is tested against its pint equivalent (``tests/test_unit_forms.py``)."""
_SPELLING = re.compile("|".join(rf"(?<![A-Za-z.]){re.escape(k)}(?![A-Za-z])"
                                for k in sorted(SPELLINGS, key=len, reverse=True)))


def normalise_unit_text(text: str) -> str:
    """Rewrite a unit string into pint's syntax: LaTeX, Unicode, degrees, ohm, micro, powers, ``a/b c``.

    A space-separated group after ``/`` is one denominator (``J/kg K`` -> ``J/(kg*K)``), as physics
    writes it; ``°C`` inside a compound unit is a temperature difference (``J/(kg °C)`` = ``J/(kg K)``).
    Returns ``""`` for an empty unit.
    """
    s = _SPELLING.sub(lambda m: SPELLINGS[m.group(0)], _unwrap(_power_of_superscripts(text)))
    for pattern, repl in _REPLACEMENTS:
        s = re.sub(pattern, repl, s)
    s = re.sub(r"\s+", " ", s).strip().strip(".,;")
    s = _WORDS.get(s, s)
    if "/" in s and "(" not in s:
        num, den = s.split("/", 1)
        parts = [p for p in re.split(r"\s*(?<!\*)\*(?!\*)\s*|\s+", den.strip()) if p]
        if len(parts) > 1 and "/" not in den:
            s = f"{num.strip() or '1'}/({'*'.join(parts)})"
    s = re.sub(r"(?<=[A-Za-z0-9)])\s+(?=[A-Za-z(])", "*", s)  # "N m" -> "N*m"
    s = s.replace(" ", "")
    if re.search(r"(?<!delta_)deg[CF]", s) and re.sub(r"(?:delta_)?deg[CF]", "", s).strip("*/()"):
        s = re.sub(r"(?<!delta_)deg([CF])", r"delta_deg\1", s)
    return s


def looks_symbolic(text: str) -> bool:
    """True when unit text is really a symbolic expression (``w \\cos \\alpha``, ``\\sqrt{gh}``, ``m_1``,
    ``\\frac{mg}{2}``'s ``mg/2``, ``+ 3.0 m/s``): LaTeX commands that are not unit markup, functions,
    subscripts, ``=``, or a number that is not an exponent."""
    if _SYMBOLIC.search(text):
        return True
    s = normalise_unit_text(text)
    return bool(re.search(r"\d", re.sub(r"\*\*[-+]?\d+(?:\.\d+)?|^1/|\(1\)/", "", s)))


_CONSTANT_UNITS = {"speed_of_light", "elementary_charge"}
"""Constants physicists write alone as a unit (``0.6c``, ``2e``); any other constant makes a unit ambiguous."""
_UNIT_CONSTANTS = {"standard_atmosphere"}
"""pint constants that are units in their own right wherever they stand (``atm``, ``L·atm``)."""


_COMPACT_METRE = re.compile(r"(?<![A-Za-z_])(k?)ms(?=\*\*-)")
"""``ms`` / ``kms`` right before a negative power (normalised): ``m s^-n`` as physicists write it, or ``ms^-n``."""


def _read_unit(text: str) -> tuple[list[pint.Unit], bool]:
    """``(readings, refused)``: the pint units ``text`` can mean (none when unreadable; two for a compact ``ms^-n``),
    and whether it was refused as ambiguous (symbolic, or read only through a physical constant)."""
    if looks_symbolic(text):
        return [], True
    s = normalise_unit_text(text)
    if not s or re.fullmatch(r"[-+0-9.*()/]+", s):
        return [], False
    forms = [s, _COMPACT_METRE.sub(r"\1m*s", s)] if _COMPACT_METRE.search(s) else [s]
    units = [u for u in (_pint_unit(f, text if len(forms) == 1 else f) for f in forms) if u is not None]
    if any(set(u._units) & _constants() - _UNIT_CONSTANTS and not (
            len(u._units) == 1 and dict(u._units).popitem() in {(c, 1) for c in _CONSTANT_UNITS}) for u in units):
        return [], True
    return units, False


def unit_readings(text: str | None) -> list[pint.Unit]:
    """Every pint unit ``text`` can mean: ``[]`` (empty, unknown, symbolic, a bare number, or readable only through a
    physical constant), one, or two for a compact ``ms^-n`` / ``kms^-n`` (``9.8 ms^-2``: metres per second squared,
    or per millisecond squared), which only a comparison with another unit decides (:func:`convert`)."""
    return [] if text is None else _read_unit(text)[0]


def parse_unit(text: str | None) -> pint.Unit | None:
    """pint unit of ``text`` after :func:`normalise_unit_text`, or ``None`` (empty, unknown, symbolic, a bare
    number, readable only through a physical constant: ``k`` is Boltzmann's constant, so ``k ohm`` and
    ``\\hat{k}`` are refused, ``c`` and ``e`` alone are the speed of light and the elementary charge; or ambiguous
    alone: ``ms^-2``, see :func:`unit_readings`)."""
    readings = unit_readings(text)
    return readings[0] if len(readings) == 1 else None


def _pint_unit(s: str, raw: str) -> pint.Unit | None:
    try:
        if " per " in f" {raw.strip()} ":
            q = registry().parse_expression(raw.strip())
            return q.units if isinstance(q, pint.Quantity) and q.magnitude == 1 else None
        return registry().parse_units(s)
    except Exception:  # pint raises many types for unknown names and bad syntax
        try:
            q = registry().parse_expression(s)
            return q.units if isinstance(q, pint.Quantity) and q.magnitude == 1 else None
        except Exception:
            return None


_ASSIGNMENT = re.compile(r"^(?:\\?[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?'?\s*(?:=|\\approx|≈)|\\approx|≈|~)\s*(?=[-+−.\d])")
_NUMBER = re.compile(
    r"^\s*(?P<num>[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?:[.,]\d+)?|\.\d+)(?:\s*[eE]\s*[-+]?\d+)?)"
    r"(?:\s*(?:\\times|×|x|\*|\\cdot|·)\s*10\s*(?:\^\s*\{?\s*(?P<exp>[-+]?\d+)\s*\}?|(?P<sup>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)))?"
)
_POWER_OF_TEN = re.compile(r"^\s*(?P<sign>[-+]?)10\s*(?:\^\s*\{?\s*(?P<exp>[-+]?\d+)\s*\}?|(?P<sup>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+))")


def _unwrap_latex(text: str) -> str:
    """Drop math delimiters and markup around the number, and a leading ``v =`` / ``\\lambda \\approx`` / ``≈``."""
    s = re.sub(r"^\s*" + _MARKUP, lambda m: m.group(1) + " ", text.strip()).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$|^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\s*" + _MARKUP, lambda m: m.group(1) + " ", s).strip()
    return _ASSIGNMENT.sub("", s)


def split_quantity(text: str) -> tuple[float | None, str]:
    """``"1.54 \\text{ m/s}^2"`` -> ``(1.54, "\\text{ m/s}^2")``; ``"3.2 \\times 10^{-19} J"`` -> ``(3.2e-19, "J")``;
    ``"10^{10} eV"`` -> ``(1e10, "eV")``; ``"\\text{13}"`` -> ``(13.0, "")``; ``"1,500 N"`` -> ``(1500.0, "N")``
    (a comma before exactly three digits groups thousands; ``"1,5 m"`` is a decimal comma).

    A leading symbol assignment (``v = 4.0 m/s``, ``\\lambda \\approx 500 nm``) is skipped. Returns
    ``(None, text)`` when the text does not start with a number.
    """
    s = _unwrap_latex(text.replace("−", "-"))
    m = _POWER_OF_TEN.match(s)  # 10^{10} eV
    if m is not None:
        exp = m.group("exp") or m.group("sup").translate(_SUPERSCRIPTS)
        return (-1.0 if m.group("sign") == "-" else 1.0) * 10.0 ** int(exp), s[m.end():].strip()
    m = _NUMBER.match(s)
    if m is None:
        return None, s
    num = m.group("num")
    thousands = re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+", num)
    value = float(num.replace(",", "")) if thousands else float(num.replace(" ", "").replace(",", "."))
    exp = m.group("exp") or (m.group("sup").translate(_SUPERSCRIPTS) if m.group("sup") else None)
    if exp is not None:
        value *= 10 ** int(exp)
    return value, s[m.end():].strip()


def clean_unit_text(text: str) -> str:
    """A readable unit string without LaTeX markup: ``"\\text{ m/s}^2\\"`` -> ``"m/s^2"``,
    ``"^{\\circ}"`` -> ``"°"``."""
    s = _unwrap(text)
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree", "°", s)
    s = re.sub(r"\^\s*\{\s*([-+]?\d+)\s*\}", r"^\1", s)
    s = re.sub(r"\\(?:hat|vec)\s*\{[^{}]*\}", " ", s)
    s = re.sub(r"\\[,;:! ]|~|\\left|\\right|\\\(|\\\)|\$|\\+\s*$", " ", s)
    s = re.sub(r"\\mu\s*", "μ", s.replace("\\Omega", "\u03a9").replace("\u2126", "\u03a9"))
    s = s.replace("\\cdot", "·").replace("\\%", "%")
    return re.sub(r"\s+", " ", s).strip().replace(" /", "/").replace("/ ", "/")


def derive_unit(answer: str | None) -> tuple[str | None, pint.Unit | None]:
    """The unit of a gold answer: ``(raw unit string, parsed pint unit)``; ``(None, None)`` when dimensionless
    or symbolic.

    ``"7.55N"`` -> ``("N", newton)``; ``"\\( 22.3^{\\circ} \\)"`` -> ``("°", degree)``; ``"0.5"``,
    ``"2 w \\cos \\alpha"``, ``"4.0 \\hat{k}"`` -> ``(None, None)``. A unit text pint cannot read (and that is
    not symbolic) keeps its raw string with ``None`` as the parsed unit.
    """
    if answer is None:
        return None, None
    value, rest = split_quantity(answer)
    if value is None:
        return None, None
    rest = rest.strip()
    if not rest or not normalise_unit_text(rest):
        return None, None
    units, refused = _read_unit(rest)
    if refused or (len(units) == 1 and units[0] == registry().dimensionless):
        return None, None
    return clean_unit_text(rest) or None, units[0] if len(units) == 1 else None


def _as_units(unit: str | pint.Unit | None) -> list[pint.Unit]:
    if unit is None or (isinstance(unit, str) and not unit.strip()):
        return [registry().dimensionless]
    return unit_readings(unit) if isinstance(unit, str) else [unit]


_ANGLE_OF = {"hertz": "turn", "revolutions_per_minute": "turn", "revolutions_per_second": "turn"}


def _angle_unit(unit: pint.Unit) -> tuple[str, float] | None:
    """``(angle unit, power)`` of a unit holding exactly one kind of angle (``Hz`` -> turn, ``rad/s`` ->
    radian, ``deg`` -> degree), else ``None``."""
    ureg, found = registry(), set()
    for name in unit._units:
        dims = ureg.get_dimensionality(name)
        if dims.get("[angle]"):
            base = ureg.parse_unit_name(name)[0][1]  # kilohertz -> hertz
            found.add(_ANGLE_OF.get(base, name if dict(dims) == {"[angle]": 1} else None))
    angle = unit.dimensionality.get("[angle]", 0)
    return (found.pop(), angle) if len(found) == 1 and None not in found and angle else None


def _read_angle_free(a: pint.Unit, b: pint.Unit) -> pint.Unit | None:
    """``a`` read in ``b``'s angle unit when ``a`` has no angle, ``b`` has one, and they agree otherwise (``s^-1``
    against ``Hz`` is cycles per second, against ``rad/s`` radians per second); never for a bare number."""
    if a.dimensionality.get("[angle]") or a.dimensionless:
        return None
    found = _angle_unit(b)
    if found is None:
        return None
    reread = a * registry().Unit(found[0]) ** found[1]
    return reread if reread.dimensionality == b.dimensionality else None


def convert(value: float, unit: str | pint.Unit | None, target: str | pint.Unit | None) -> float | None:
    """``value`` in ``unit`` expressed in ``target`` (``None`` or ``""`` = dimensionless, so ``25 %`` -> 0.25);
    ``None`` when a unit cannot be read, or the two differ in dimension (angles included: ``60 rpm`` -> ``1 Hz``,
    ``1 rad/s`` -> ``0.159 Hz``, ``1 s^-1`` -> ``1 Hz``, but a bare ``30`` is no angle). Offset units convert.

    A unit with two readings (``ms^-2``, :func:`unit_readings`) is read as the one of the other side's dimension;
    ``None`` when both or neither fit.

    >>> convert(2, "km", "m"), convert(25, "%", None), convert(3, "m", "s"), convert(60, "rpm", "Hz")
    (2000.0, 0.25, None, 1.0)
    """
    found = {v for a in _as_units(unit) for b in _as_units(target) if (v := _convert_one(value, a, b)) is not None}
    return found.pop() if len(found) == 1 else None


def _convert_one(value: float, a: pint.Unit, b: pint.Unit) -> float | None:
    if a.dimensionality != b.dimensionality:
        a_read, b_read = _read_angle_free(a, b), _read_angle_free(b, a)
        a, b = a if a_read is None else a_read, b if b_read is None else b_read
    try:
        return float(registry().Quantity(value, a).to(b).magnitude)
    except (pint.DimensionalityError, pint.OffsetUnitCalculusError):
        return None


def same_unit(predicted: str | None, gold: str | None, rel_tol: float = 1e-9) -> bool:
    """True when both are read and are the same unit by dimension AND scale (``m/s`` == ``meter/second``;
    ``km/h`` != ``m/s``; ``N*m`` == ``J``; ``kΩ`` == ``kiloohm``; ``rad/s`` != ``Hz``; ``ms^-2`` == ``m/s^2``, the
    reading of the other side's dimension)."""
    if not unit_readings(predicted) or not unit_readings(gold):
        return False
    factor = convert(1.0, predicted, gold)
    return factor is not None and math.isclose(factor, 1.0, rel_tol=rel_tol)


def unit_symbol(text: str | None) -> str | None:
    """The unit's symbols as pint writes them (``meters per second`` -> ``m / s``, ``newtons`` -> ``N``); ``None``
    when it has no single reading."""
    unit = parse_unit(text)
    return None if unit is None else f"{unit:~}"


def to_quantity(text: str) -> pint.Quantity | None:
    """A value with its unit (``"46.3 kN"`` -> 46.3 kilonewton); dimensionless numbers get no unit."""
    value, rest = split_quantity(text)
    if value is None:
        return None
    unit = parse_unit(rest) if rest else None
    if rest and unit is None:
        return None
    return registry().Quantity(value, unit) if unit is not None else registry().Quantity(value)
