"""Physical units with ``pint``: normalise answer strings, split value and unit, compare units.

Answer strings come in many spellings (``7.55N``, ``46.3 kN``, ``1.54 \\text{ m/s}^2``,
``\\( 22.3^{\\circ} \\)``, ``3.2 \\times 10^{-19} J``, ``100 Ω``, ``5 μF``, ``J/kg K``). pint needs help
with several of them: the Unicode OHM SIGN is rejected, ``3 °C`` in
one string raises (offset units), ``J/kg K`` parses as J·K/kg, ``kn`` means knots. Everything here
normalises first, then asks pint; a string pint cannot read gives ``None``, never an exception.
"""

from __future__ import annotations

import functools
import math
import re

import pint

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_REPLACEMENTS = [  # (pattern, replacement), applied in order to unit text
    (r"\\(?:text|mathrm|rm|operatorname|mathit)\s*\{([^{}]*)\}", r"\1"),
    (r"\\[,;:! ]|~", " "),
    (r"\^\s*\{\s*\\circ\s*\}\s*C\b|°\s*C\b|℃", " degC "),
    (r"\^\s*\{\s*\\circ\s*\}\s*F\b|°\s*F\b|℉", " degF "),
    (r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree", " degree "),
    (r"[ΩΩ]|\\Omega", " ohm "),
    (r"\\mu\s*|[μµ]", "u"),
    (r"\\AA|Å", " angstrom "),
    (r"\\cdot|·|⋅|×|\\times|(?<!\*)\*(?!\*)", " * "),
    (r"\^\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}", r"**\1"),
    (r"\^\s*\(?\s*([-+]?\d+(?:\.\d+)?)\s*\)?", r"**\1"),
    (r"\\left|\\right|[{}$]|\\\(|\\\)|\\\[|\\\]", " "),
]
_WORDS = {"percent": "percent", "%": "percent", "degrees": "degree", "deg": "degree"}
_NUMBER = re.compile(
    r"^\s*(?P<num>[-+−]?(?:\d+(?:[.,]\d+)?|\.\d+)(?:\s*[eE]\s*[-+−]?\d+)?)"
    r"(?:\s*(?:\\times|×|x|\*|\\cdot|·)\s*10\s*(?:\^\s*\{?\s*(?P<exp>[-+−]?\d+)\s*\}?|(?P<sup>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)))?"
)


@functools.lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    """The one pint registry the project uses (offset units allowed in conversions)."""
    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


def normalise_unit_text(text: str) -> str:
    """Rewrite a unit string into pint's syntax: LaTeX, Unicode, degrees, ohm, micro, powers, ``a/b c``.

    A space-separated group after ``/`` is one denominator (``J/kg K`` -> ``J/(kg*K)``), as physics
    writes it. Returns ``""`` for an empty unit.
    """
    s = text.translate(_SUPERSCRIPTS) if not re.search(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]", text) else _superscript_powers(text)
    for pattern, repl in _REPLACEMENTS:
        s = re.sub(pattern, repl, s)
    s = re.sub(r"\s+", " ", s).strip().strip(".,;")
    s = _WORDS.get(s, s)
    if "/" in s and "(" not in s:
        num, den = s.split("/", 1)
        parts = [p for p in re.split(r"\s*(?<!\*)\*(?!\*)\s*|\s+", den.strip()) if p]
        if len(parts) > 1:
            s = f"{num.strip() or '1'}/({'*'.join(parts)})"
    s = re.sub(r"(?<=[A-Za-z0-9)])\s+(?=[A-Za-z(])", "*", s)  # "N m" -> "N*m"
    return s.replace(" ", "")


def _superscript_powers(text: str) -> str:
    return re.sub(r"([⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)", lambda m: "**" + m.group(1).translate(_SUPERSCRIPTS), text)


def parse_unit(text: str | None) -> pint.Unit | None:
    """pint unit of ``text`` after :func:`normalise_unit_text`, or ``None`` (empty, unknown or dimensionless number)."""
    if text is None:
        return None
    s = normalise_unit_text(text)
    if not s or re.fullmatch(r"[-+0-9.*()]+", s):
        return None
    try:
        if " per " in f" {text.strip()} ":
            q = registry().parse_expression(text.strip())
            return q.units if isinstance(q, pint.Quantity) and q.magnitude == 1 else None
        return registry().parse_units(s)
    except Exception:  # pint raises many types for unknown names and bad syntax
        try:
            q = registry().parse_expression(s)
            return q.units if isinstance(q, pint.Quantity) and q.magnitude == 1 else None
        except Exception:
            return None


_ASSIGNMENT = re.compile(r"^(?:\\?[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?'?\s*(?:=|\\approx|≈)|\\approx|≈|~)\s*(?=[-+−.\d])")


def _unwrap_latex(text: str) -> str:
    """Drop math delimiters and a leading ``v =`` / ``\\lambda \\approx`` / ``≈`` before the number."""
    s = text.strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$|^\$+|\$+$", "", s).strip()
    return _ASSIGNMENT.sub("", s)


def split_quantity(text: str) -> tuple[float | None, str]:
    """``"1.54 \\text{ m/s}^2"`` -> ``(1.54, "\\text{ m/s}^2")``; ``"3.2 \\times 10^{-19} J"`` -> ``(3.2e-19, "J")``.

    A leading symbol assignment (``v = 4.0 m/s``, ``\\lambda \\approx 500 nm``) is skipped. Returns
    ``(None, text)`` when the text does not start with a number.
    """
    s = _unwrap_latex(text).replace("−", "-")
    m = _NUMBER.match(s)
    if m is None:
        return None, s
    value = float(m.group("num").replace(" ", "").replace(",", ".").replace("−", "-"))
    exp = m.group("exp") or (m.group("sup").translate(_SUPERSCRIPTS) if m.group("sup") else None)
    if exp is not None:
        value *= 10 ** int(exp.replace("−", "-"))
    return value, s[m.end():].strip()


def clean_unit_text(text: str) -> str:
    """A readable unit string without LaTeX markup: ``"\\text{ m/s}^2"`` -> ``"m/s^2"``, ``"^{\\circ}"`` -> ``"°"``."""
    s = re.sub(r"\\(?:text|mathrm|rm|operatorname|mathit)\s*\{([^{}]*)\}", r"\1", text)
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree", "°", s)
    s = re.sub(r"\^\s*\{\s*([-+]?\d+)\s*\}", r"^\1", s)
    s = re.sub(r"\\[,;:! ]|~|\\left|\\right|\\\(|\\\)|\$", " ", s)
    s = re.sub(r"\\mu\s*", "μ", s.replace("\\Omega", "Ω")).replace("\\cdot", "·")
    return re.sub(r"\s+", " ", s).strip().replace(" /", "/").replace("/ ", "/")


def derive_unit(answer: str | None) -> tuple[str | None, pint.Unit | None]:
    """The unit of a gold answer: ``(raw unit string, parsed pint unit)``; ``(None, None)`` when dimensionless.

    ``"7.55N"`` -> ``("N", newton)``; ``"\\( 22.3^{\\circ} \\)"`` -> ``("°", degree)``; ``"0.5"`` -> ``(None, None)``.
    A unit text pint cannot read keeps its raw string with ``None`` as the parsed unit.
    """
    if answer is None:
        return None, None
    value, rest = split_quantity(answer)
    if value is None:
        return None, None
    rest = rest.strip()
    if not rest:
        return None, None
    unit = parse_unit(rest)
    if unit is not None and unit == registry().dimensionless:
        return None, None
    return clean_unit_text(rest) or None, unit


def _as_unit(unit: str | pint.Unit | None) -> pint.Unit | None:
    if unit is None or (isinstance(unit, str) and not unit.strip()):
        return registry().dimensionless
    return parse_unit(unit) if isinstance(unit, str) else unit


def convert(value: float, unit: str | pint.Unit | None, target: str | pint.Unit | None) -> float | None:
    """``value`` in ``unit`` expressed in ``target`` (``None`` or ``""`` = dimensionless, so ``25 %`` -> 0.25);
    ``None`` when a unit cannot be read or the two differ in dimension. Offset units convert (``degC``).

    >>> convert(2, "km", "m"), convert(25, "%", None), convert(3, "m", "s")
    (2000.0, 0.25, None)
    """
    a, b = _as_unit(unit), _as_unit(target)
    if a is None or b is None:
        return None
    try:
        return float(registry().Quantity(value, a).to(b).magnitude)
    except (pint.DimensionalityError, pint.OffsetUnitCalculusError):
        return None


def same_unit(predicted: str | None, gold: str | None, rel_tol: float = 1e-9) -> bool:
    """True when both parse and are the same unit by dimension AND scale (``m/s`` == ``meter/second``;
    ``km/h`` != ``m/s``; ``N*m`` == ``J``)."""
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
