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
            raise RuntimeError(f"pint {pint.__version__}'s definitions lack {old!r}; update lit_grpo.units._PATCHES")
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
                       r"times|AA|left|right|frac|hat|vec|%|[,;:! ()\[\]]))[A-Za-z]+|_|=|\b(?:sin|cos|tan|sqrt|ln|log|"
                       r"exp)\b")


def _power_of_superscripts(text: str) -> str:
    return re.sub(r"([⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)", lambda m: "^{" + m.group(1).translate(_SUPERSCRIPTS) + "}", text)


def _unwrap(text: str) -> str:
    """``\\text{..}`` and friends unwrapped, ``\\frac{a}{b}`` -> ``(a)/(b)``, innermost first."""
    prev = None
    while prev != text:
        prev = text
        text = re.sub(_MARKUP, r"\1", text)
        text = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", text)
    return text


def normalise_unit_text(text: str) -> str:
    """Rewrite a unit string into pint's syntax: LaTeX, Unicode, degrees, ohm, micro, powers, ``a/b c``.

    A space-separated group after ``/`` is one denominator (``J/kg K`` -> ``J/(kg*K)``), as physics
    writes it; ``°C`` inside a compound unit is a temperature difference (``J/(kg °C)`` = ``J/(kg K)``).
    Returns ``""`` for an empty unit.
    """
    s = _unwrap(_power_of_superscripts(text))
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
    if re.search(r"deg[CF]", s) and re.sub(r"deg[CF]", "", s).strip("*/()"):
        s = re.sub(r"deg([CF])", r"delta_deg\1", s)
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


def _read_unit(text: str) -> tuple[pint.Unit | None, bool]:
    """``(unit, refused)``: the pint unit of ``text`` (``None`` when unreadable), and whether it was refused as
    ambiguous (symbolic, or read only through a physical constant)."""
    if looks_symbolic(text):
        return None, True
    s = normalise_unit_text(text)
    if not s or re.fullmatch(r"[-+0-9.*()/]+", s):
        return None, False
    unit = _pint_unit(s, text)
    if unit is not None and set(unit._units) & _constants() and not (
            len(unit._units) == 1 and dict(unit._units).popitem() in {(c, 1) for c in _CONSTANT_UNITS}):
        return None, True
    return unit, False


def parse_unit(text: str | None) -> pint.Unit | None:
    """pint unit of ``text`` after :func:`normalise_unit_text`, or ``None`` (empty, unknown, symbolic, a bare
    number, or readable only through a physical constant: ``k`` is Boltzmann's constant, so ``k ohm`` and
    ``\\hat{k}`` are refused; ``c`` and ``e`` alone are the speed of light and the elementary charge)."""
    return None if text is None else _read_unit(text)[0]


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
    unit, refused = _read_unit(rest)
    if refused or (unit is not None and unit == registry().dimensionless):
        return None, None
    return clean_unit_text(rest) or None, unit


def _as_unit(unit: str | pint.Unit | None) -> pint.Unit | None:
    if unit is None or (isinstance(unit, str) and not unit.strip()):
        return registry().dimensionless
    return parse_unit(unit) if isinstance(unit, str) else unit


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

    >>> convert(2, "km", "m"), convert(25, "%", None), convert(3, "m", "s"), convert(60, "rpm", "Hz")
    (2000.0, 0.25, None, 1.0)
    """
    a, b = _as_unit(unit), _as_unit(target)
    if a is None or b is None:
        return None
    if a.dimensionality != b.dimensionality:
        a_read, b_read = _read_angle_free(a, b), _read_angle_free(b, a)
        a, b = a if a_read is None else a_read, b if b_read is None else b_read
    try:
        return float(registry().Quantity(value, a).to(b).magnitude)
    except (pint.DimensionalityError, pint.OffsetUnitCalculusError):
        return None


def same_unit(predicted: str | None, gold: str | None, rel_tol: float = 1e-9) -> bool:
    """True when both parse and are the same unit by dimension AND scale (``m/s`` == ``meter/second``;
    ``km/h`` != ``m/s``; ``N*m`` == ``J``; ``kΩ`` == ``kiloohm``; ``rad/s`` != ``Hz``)."""
    a, b = parse_unit(predicted), parse_unit(gold)
    factor = None if a is None or b is None else convert(1.0, a, b)
    return factor is not None and math.isclose(factor, 1.0, rel_tol=rel_tol)


def to_quantity(text: str) -> pint.Quantity | None:
    """A value with its unit (``"46.3 kN"`` -> 46.3 kilonewton); dimensionless numbers get no unit."""
    value, rest = split_quantity(text)
    if value is None:
        return None
    unit = parse_unit(rest) if rest else None
    if rest and unit is None:
        return None
    return registry().Quantity(value, unit) if unit is not None else registry().Quantity(value)
