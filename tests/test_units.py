"""Unit derivation and comparison on a table of real-looking physics answer strings."""

import pytest

from lit_grpo.tasks.phyx.units import (convert, derive_unit, normalise_unit_text, parse_unit, registry, same_unit, split_quantity,
                            to_quantity)

U = registry()

DERIVE = [  # (gold answer text, raw unit string, pint unit or None)
    ("7.55N", "N", U.newton),
    ("46.3 kN", "kN", U.kilonewton),
    (r"1.54 \text{ m/s}^2", "m/s^2", U.meter / U.second ** 2),
    (r"\( 22.3^{\circ} \)", "°", U.degree),
    ("60°", "°", U.degree),
    (r"3.2 \times 10^{-19} J", "J", U.joule),
    ("100 \u2126", "\u03a9", U.ohm),  # U+2126 OHM SIGN, which pint itself rejects (shown as Greek omega)
    ("100 Ω", "Ω", U.ohm),  # Greek capital omega
    (r"10 \Omega", "Ω", U.ohm),
    ("5 μF", "μF", U.microfarad),
    ("5 µF", "µF", U.microfarad),  # micro sign U+00B5
    ("20 °C", "°C", U.degC),  # offset unit in one string, which pint itself rejects
    ("4200 J/kg K", "J/kg K", U.joule / U.kilogram / U.kelvin),  # pint alone reads J*K/kg
    ("8.31 J/(mol K)", "J/(mol K)", U.joule / U.mole / U.kelvin),
    ("1.6 kJ/(kg·K)", "kJ/(kg·K)", U.kilojoule / U.kilogram / U.kelvin),
    ("1.5 × 10⁸ m/s", "m/s", U.meter / U.second),
    ("2.5 m/s²", "m/s²", U.meter / U.second ** 2),
    ("9.8 m/s^2", "m/s^2", U.meter / U.second ** 2),
    (r"1.2 \times 10^{3} \mathrm{~kg/m^3}", "kg/m^3", U.kilogram / U.meter ** 3),
    (r"4.0 \mathrm{~m}", "m", U.meter),
    ("6.63e-34 J s", "J s", U.joule * U.second),
    ("3 N·m", "N·m", U.newton * U.meter),
    ("300 K", "K", U.kelvin),
    ("12 V", "V", U.volt),
    ("0.25 A", "A", U.ampere),
    ("3.0 eV", "eV", U.electron_volt),
    ("500 nm", "nm", U.nanometer),
    ("50 Hz", "Hz", U.hertz),
    ("1.0 x 10^-3 T", "T", U.tesla),
    ("2 mol", "mol", U.mole),
    ("-3.2 m/s", "m/s", U.meter / U.second),
    ("5.0 cm", "cm", U.centimeter),
    ("2 dB", "dB", U.decibel),
    ("12 %", "%", U.percent),
    # forms seen in PhyX options and in the embedded physics set
    ("7.55N ", "N", U.newton),  # trailing space, as 175 PhyX OE answers have
    ("v = 4.0 m/s", "m/s", U.meter / U.second),  # a symbol assignment before the number
    (r"$T_{1} = 300\,\mathrm{K}$", "K", U.kelvin),
    (r"\lambda \approx 500 nm", "nm", U.nanometer),
    (r"5.0 \mu C", "μC", U.microcoulomb),  # LaTeX micro with a space before the unit letter
    (r"2.97 \times 10^{6} N/C", "N/C", U.newton / U.coulomb),
    (r"\( 36.6^{\circ} \)", "°", U.degree),
    (r"$-4.9\,\mathrm{J}$", "J", U.joule),
    ("0.60 MeV", "MeV", U.megaelectron_volt),
    (r"4.5 \times 10^{14} \mathrm{~Hz}", "Hz", U.hertz),
    ("-0.891 eV", "eV", U.electron_volt),
    # markup whose content holds braces of its own (an exponent, a nested command)
    (r"5\,\mathrm{m\,s^{-1}}", "m s^-1", U.meter / U.second),
    (r"2.0\,\mathrm{kg\,m^{2}\,s^{-2}}", "kg m^2 s^-2", U.kilogram * U.meter ** 2 / U.second ** 2),
    (r"3 \text{J\,kg^{-1}\,K^{-1}}", "J kg^-1 K^-1", U.joule / U.kilogram / U.kelvin),
    (r"4 \text{ \mathrm{N\,m}}", "N m", U.newton * U.meter),
    ("0.5", None, None),
    ("3", None, None),
    (r"\( 0.75 \)", None, None),
    ("Not a number", None, None),
]


@pytest.mark.parametrize("text,raw,unit", DERIVE, ids=[d[0] for d in DERIVE])
def test_derive_unit_table(text, raw, unit):
    got_raw, got_unit = derive_unit(text)
    assert got_raw == raw
    assert got_unit == unit


def test_split_quantity_values():
    assert split_quantity("7.55N") == (7.55, "N")
    value, rest = split_quantity(r"3.2 \times 10^{-19} J")
    assert value == pytest.approx(3.2e-19) and rest == "J"
    assert split_quantity("1,5 m")[0] == 1.5
    assert split_quantity("about 5 m") == (None, "about 5 m")
    assert split_quantity("x = -2.0 cm") == (-2.0, "cm")
    assert split_quantity("A = B") == (None, "A = B")


def test_normalise_unit_text_table():
    assert normalise_unit_text("J/kg K") == "J/(kg*K)"
    assert normalise_unit_text(r"\text{m/s}^{2}") == "m/s**2"
    assert normalise_unit_text("N m") == "N*m"
    assert normalise_unit_text("") == ""


SAME = [
    ("m/s", "meters per second", True),
    ("m/s", "meter/second", True),
    ("km/h", "m/s", False),
    ("N m", "J", True),
    ("N", "kN", False),
    ("J/kg K", "J/(kg*K)", True),
    ("Ω", "ohm", True),
    ("m/s", "m/s^2", False),
    ("banana", "m", False),
    (None, "m", False),
]


@pytest.mark.parametrize("a,b,expected", SAME)
def test_same_unit_table(a, b, expected):
    assert same_unit(a, b) is expected


CONVERT = [  # (value, unit, target, expected): worked out by hand
    (0.0463, "MN", "kN", 46.3),
    (72.0, "km/h", "m/s", 20.0),
    (25.0, "%", None, 0.25),
    (0.25, "", "", 0.25),
    (30.5, "°C", "K", 303.65),
    (1.0, r"\text{ m/s}^2", "m s^-2", 1.0),
    (5.0, "m", "s", None),  # another dimension
    (5.0, "m", None, None),  # a unit where none is wanted
    (5.0, "bananas", "m", None),  # unreadable
]


@pytest.mark.parametrize("value,unit,target,expected", CONVERT)
def test_convert_table(value, unit, target, expected):
    got = convert(value, unit, target)
    assert got == (None if expected is None else pytest.approx(expected))


def test_to_quantity_converts():
    assert to_quantity("46.3 kN").to("N").magnitude == pytest.approx(46300)
    assert to_quantity("0.5").dimensionless
    assert to_quantity("5 bananas") is None
    assert parse_unit("kn") != parse_unit("kN")  # pint reads lower-case kn as knots
