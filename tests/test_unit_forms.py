"""Physical units as physicists write them: a table of answer/gold pairs graded by the offline judge, the
strict unit match and the units derived from real gold texts. Every expected value is worked out by hand
(the conversions are in the comments); 2 = the value within 1 % in the gold's unit, 1 = the right number
with a missing or wrong unit (or within 5 %), 0 = otherwise.
"""

import math

import pytest

from lit_grpo.tasks.phyx.rubric import unit_match
from lit_grpo.tasks.phyx.judge.offline import grade_open_answer
from lit_grpo.tasks.phyx.units import convert, derive_unit, parse_unit, registry, same_unit, split_quantity

U = registry()
OHM_SIGN, OMEGA = "\u2126", "\u03a9"

GRADE = [  # (answer, gold, correctness)
    # prefixed and Unicode ohm (pint alone reads kΩ after our old rewrite as Boltzmann constant x ohm)
    (f"5 k{OMEGA}", f"5000 {OMEGA}", 2),
    (f"5 k{OHM_SIGN}", f"5000 {OMEGA}", 2),  # U+2126 OHM SIGN
    (f"5000 {OHM_SIGN}", f"5 k{OMEGA}", 2),
    (r"5 k\Omega", r"5000 \Omega", 2),
    (r"5 \text{k}\Omega", "5000 ohm", 2),
    (f"5 kohm", f"5000 {OHM_SIGN}", 2),
    (f"4.7 M{OMEGA}", f"4700 k{OMEGA}", 2),
    (f"2 m{OMEGA}", f"0.002 {OMEGA}", 2),
    (f"3 μ{OMEGA}", f"3e-6 {OMEGA}", 2),
    (f"5 k{OMEGA}", f"5 {OMEGA}", 1),  # 5000 ohm != 5 ohm: the number alone matches
    (f"5 k {OMEGA}", f"5000 {OMEGA}", 0),  # "k ohm": k is Boltzmann's constant, refused, never guessed
    ("5 k", f"5000 {OMEGA}", 0),
    # an exponent before or inside parentheses
    ("9.8 m/(s^2)", "9.8 m/s^2", 2),
    ("9.8 m/s^2", "9.8 m/(s^2)", 2),
    ("9.8 m/(s^{2})", "9.8 m/s^2", 2),
    ("9.8 m/(s)^2", "9.8 m/s^2", 2),
    ("9.8 m^(1)/s^(2)", "9.8 m/s^2", 2),
    ("9.8 (kg)(m/s^2)", "9.8 N", 2),
    ("9.8 m/(s^2)", "9.8 m/s", 1),  # another dimension
    # caret-less and Unicode exponents
    ("3.0 m s-1", "3.0 m/s", 2),
    ("9.8 m s-2", "9.8 m/s^2", 2),
    ("9.8 m/s2", "9.8 m/s^2", 2),
    ("2 m2", "2 m^2", 2),
    ("1000 kg m-3", "1 g/cm^3", 2),  # 1 g/cm^3 = 1000 kg/m^3
    ("3.0 m s⁻¹", "3.0 m/s", 2),
    ("2.5 m/s²", "2.5 m/s^2", 2),
    ("9.8 m·s⁻²", "9.8 m/s^2", 2),
    ("3.0 m s-1", "3.0 m/s^2", 1),
    # rotation and angle: a turn is 2 pi rad, 1 Hz is one cycle per second
    ("60 rpm", "1 Hz", 2),
    ("1 Hz", "60 rpm", 2),
    ("120 rev/min", "2 Hz", 2),
    ("6.283 rad/s", "1 Hz", 2),  # 6.283 / (2 pi) = 0.99997 Hz
    ("1 rad/s", "1 Hz", 1),  # 1 rad/s = 0.159 Hz: the number alone matches
    ("3000 rpm", "314.16 rad/s", 2),  # 50 rev/s x 2 pi = 314.159 rad/s
    ("2 rev/s", r"4\pi rad/s", 2),
    ("3 rev", r"6\pi rad", 2),
    ("3 revolutions", "1080°", 2),
    ("50 s^-1", "50 Hz", 2),  # s^-1 against Hz: cycles per second
    ("50 Hz", "50 s^{-1}", 2),
    ("5 s^-1", "5 rad/s", 2),  # s^-1 against rad/s: radians per second
    ("2 kHz", "2000 s^-1", 2),
    ("0.5236 rad", "30°", 2),  # 30 deg = 0.523599 rad
    ("30°", "0.5236 rad", 2),
    (r"90^{\circ}", r"\frac{\pi}{2} rad", 2),
    ("30", "30°", 1),  # no unit: right number
    ("0.5236", "30°", 0),  # a bare number is no angle (degrees or radians?)
    # constants physicists write as units
    ("1.8e8 m/s", "0.6c", 2),  # 0.6 x 299792458 = 1.7988e8 m/s
    ("3.2e-19 C", "2e", 2),  # 2 x 1.602e-19 C
    # \text{13} and other wrappers around a plain number
    (r"\text{13}", "13", 2),
    ("13", r"\text{13}", 2),
    (r"\mathrm{13}", "13", 2),
    ("$13$", "13", 2),
    (r"\(13\)", "13", 2),
    (r"\text{13 m}", "13 m", 2),
    (r"\text{12}", "13", 0),
    # gold texts of real options: trailing backslash, a bare power of ten, unit vectors
    ("1.54 m/s^2", "1.54 \\text{ m/s}^2\\", 2),
    ("1e10 eV", r"10^10 \text{ eV}", 2),
    ("1.6e-9 J", r"10^{10} \text{ eV}", 2),  # 1e10 eV = 1.602e-9 J
    ("-2.0 T", r"-2.0 \hat{k} \text{ T}", 2),
    ("4.0", r"4.0 \hat{k}", 2),
    # written-together products, rev, diopters
    ("6.63e-34 J s", r"6.63 \times 10^{-34} Js", 2),
    ("6.63e-34 Js", "6.63e-34 J·s", 2),
    ("2.5 diopters", "2.5 m^-1", 2),
    ("0.4 m^-1", "0.4 dpt", 2),
    ("5 Nm", "5 J", 2),
    ("5 N s", "5 kg m/s", 2),
    ("5 Ns", "5 kg m/s", 2),
    # temperatures: absolute, and differences inside compound units
    ("4200 J/(kg °C)", "4200 J/(kg K)", 2),
    (r"4200 J/(kg \cdot ^{\circ}C)", "4.2 kJ/(kg·K)", 2),
    ("4.2 kJ/kg K", "4200 J/(kg·K)", 2),
    ("30 °C", "303.15 K", 2),
    (r"20 ^{\circ}C", "68 °F", 2),
    ("300 K", "26.85 °C", 2),
    # symbolic and dimensionless answers: no unit is made up
    (r"2 w \cos \alpha", r"2w\cos\alpha", 2),
    (r"2 w \sin \alpha", r"2 w \cos \alpha", 0),  # not 1: "w \cos \alpha" is no unit
    (r"mg\sin\theta", r"mg \sin\theta", 2),
    (r"\frac{v^2}{g}", "v^2/g", 2),
    ("0.75", r"\frac{3}{4}", 2),
    (r"2\sqrt{3} m/s", "3.46 m/s", 2),
    ("25 %", "0.25", 2),
    ("0.25", "25%", 2),
    ("25", "25%", 1),
    # values, prefixes and spellings
    ("1.6e-19 C", "3.2e-19 C", 0),  # math-verify alone rounds both to 0
    ("6.63e-34 J s", "6.62e-34 J s", 2),
    ("46.3 kN", "0.0463 MN", 2),
    ("72 km/h", "20 m/s", 2),
    ("7.55", "7.55N", 1),
    ("7.55 kN", "7.55N", 1),
    ("9 N", "7.55N", 0),
    ("7.8 N", "7.55 N", 1),  # 3.3 % off
    (r"3 \times 10^8 m/s", "3.0 × 10⁸ m/s", 2),
    ("5 μF", "5e-6 F", 2),
    (r"5 \mu F", "5 µF", 2),
    ("500 nm", r"5000 \AA", 2),
    ("500 nm", "5000 Å", 2),
    ("1 kWh", "3.6 MJ", 2),
    ("1.0 x 10^-3 T", "1 mT", 2),
    ("3 N m", "3 J", 2),
    ("1,500 N", "1.5 kN", 2),
    ("1,5 m", "1.5 m", 2),
    ("v = 4.0 m/s", "4.0 m/s", 2),
    ("-0.891 eV", r"-1.43 \times 10^{-19} J", 2),  # -0.891 x 1.602e-19 = -1.4275e-19 J
]


@pytest.mark.parametrize("answer,gold,expected", GRADE, ids=[f"{a} | {g}" for a, g, _ in GRADE])
def test_offline_judge_grades_unit_forms(answer, gold, expected):
    assert grade_open_answer(answer, gold) == expected


def test_the_table_is_large():
    assert len(GRADE) >= 80


SAME = [  # (predicted unit, gold unit, same by dimension and scale)
    ("rad/s", "Hz", False),  # 1 rad/s = 1/(2 pi) Hz
    ("Hz", "rad/s", False),
    ("s^-1", "Hz", True),
    ("1/s", "rad/s", True),
    ("Hz", "cycle/s", True),
    ("rpm", "rev/min", True),
    ("rev", "turn", True),
    ("rev", "rad", False),
    ("°", "deg", True),
    ("rad", "°", False),
    (f"k{OMEGA}", "kiloohm", True),
    (f"k{OHM_SIGN}", f"k{OMEGA}", True),
    (OHM_SIGN, "ohm", True),
    (f"M{OMEGA}", f"k{OMEGA}", False),
    (f"{OMEGA}·m", "ohm m", True),
    ("m/(s^2)", "m/s^2", True),
    ("m/(s^2)", "m/s", False),
    ("(kg)(m/s^2)", "N", True),
    ("m s-1", "m/s", True),
    ("kg m-3", "kg/m^3", True),
    ("Js", "J·s", True),
    ("J s", "Js", True),
    ("diopters", "m^-1", True),
    ("dioptre", "diopter", True),
    ("J/(kg °C)", "J/(kg K)", True),
    ("k", "J/K", False),  # Boltzmann's constant is not a unit
    (r"\hat{k}", "m", False),
    ("c", "m/s", False),  # c = 299792458 m/s: not the same scale
    ("k ohm", "kiloohm", False),
]


@pytest.mark.parametrize("pred,gold,expected", SAME)
def test_strict_unit_match(pred, gold, expected):
    assert same_unit(pred, gold) is expected
    assert unit_match(pred, gold, strict=True) == float(expected)


DERIVE = [  # (gold answer text of a real option, raw unit string, pint unit name or None)
    ("1.54 \\text{ m/s}^2\\", "m/s^2", "meter / second ** 2"),  # trailing LaTeX backslash
    ("3.2 \\text{ N}\\\\", "N", "newton"),
    (r"10^10 \text{ eV}", "eV", "electron_volt"),
    (r"10^{10} \text{ eV}", "eV", "electron_volt"),
    (r"-2.0 \hat{k} \text{ T}", "T", "tesla"),
    (r"4.0 \hat{k}", None, None),
    (r"3 \mathbf{\hat{i}}", None, None),
    (r"w \cos \alpha", None, None),
    (r"2 w \cos \alpha", None, None),
    (r"2\sqrt{gh}", None, None),
    (r"\frac{mg}{2}", None, None),
    (r"3 m_1 g", None, None),
    (r"2 \pi", None, None),
    (r"\text{13}", None, None),
    (r"6.6 \times 10^{-34} Js", "Js", "joule_second"),
    ("2 rev", "rev", "rev"),
    ("2.5 diopters", "diopters", "diopter"),
    (f"5 k{OHM_SIGN}", f"k{OMEGA}", "kiloohm"),
    ("3.0 m s-1", "m s-1", "meter / second"),
    ("60 rpm", "rpm", "revolutions_per_minute"),
    ("5 k", None, None),  # only Boltzmann's constant: refused
    ("0.6c", "c", "speed_of_light"),  # c and e alone are units physicists write
    ("2e", "e", "elementary_charge"),
]


@pytest.mark.parametrize("text,raw,unit", DERIVE, ids=[d[0] for d in DERIVE])
def test_derive_unit_from_real_option_text(text, raw, unit):
    assert derive_unit(text) == (raw, None if unit is None else U.parse_units(unit))


def test_one_registry_with_the_physicists_angles():
    assert convert(60, "rpm", "Hz") == pytest.approx(1.0)
    assert convert(1, "rad/s", "Hz") == pytest.approx(1 / (2 * math.pi))
    assert convert(1, "Hz", "rad/s") == pytest.approx(2 * math.pi)
    assert convert(30, None, "degree") is None
    assert parse_unit("k") is None and parse_unit(f"k{OMEGA}") == U.kiloohm
    assert split_quantity(r"10^{-3} \text{ m}") == (0.001, r"\text{ m}")


SPELLINGS = [("rpm","revolutions_per_minute"),("r/min","revolutions_per_minute"),("rev/min","revolutions_per_minute"),("rev min^-1","revolutions_per_minute"),
("min^-1","1/minute"),("rad/s","radian/second"),("rad s^-1","radian/second"),("rad·s⁻¹","radian/second"),("rad s-1","radian/second"),
("rad/s^2","radian/second**2"),("rad s^-2","radian/second**2"),("rps","revolutions_per_second"),("r/s","revolutions_per_second"),("rev/s","revolutions_per_second"),
("s^-1","1/second"),("1/s","1/second"),("kWh","kilowatt*hour"),("kW·h","kilowatt*hour"),("kW h","kilowatt*hour"),("kW⋅h","kilowatt*hour"),
("N·m","newton*meter"),("N m","newton*meter"),("Nm","newton*meter"),("N⋅m","newton*meter"),("J/(kg·K)","joule/kilogram/kelvin"),("J kg^-1 K^-1","joule/kilogram/kelvin"),("J·kg⁻¹·K⁻¹","joule/kilogram/kelvin"),
("m s^-2","meter/second**2"),("m·s⁻²","meter/second**2"),("Ω·m","ohm*meter"),("ohm m","ohm*meter"),("µF","microfarad"),("μF","microfarad"),("uF","microfarad"),
("kPa","kilopascal"),("atm","atmosphere"),("mmHg","millimeter_Hg"),("mm Hg","millimeter_Hg"),("torr","torr"),("Torr","torr"),("L","liter"),("l","liter"),("mL","milliliter"),("ml","milliliter"),("cm³","centimeter**3"),("cc","centimeter**3"),
("km/h","kilometer/hour"),("kmph","kilometer/hour"),("km h^-1","kilometer/hour"),("kph","kilometer/hour"),("mph","mile/hour"),("arcmin","arcminute"),("arcsec","arcsecond"),("′","arcminute"),("″","arcsecond"),
("mrad","milliradian"),("sr","steradian"),("rev","turn"),("cycles/s","hertz"),("c/s","hertz"),("Wb","weber"),("T","tesla"),("G","gauss"),("dB","decibel"),("lm","lumen"),("lx","lux"),("cd","candela"),("mol","mole"),
("kg·m²","kilogram*meter**2"),("kg m^2","kilogram*meter**2"),("kg·m²/s","kilogram*meter**2/second"),("J·s","joule*second"),("Js","joule*second"),("eV","electron_volt"),("MeV","megaelectron_volt"),("u","dalton"),("amu","dalton"),("Da","dalton"),
("A·h","ampere*hour"),("Ah","ampere*hour"),("mAh","milliampere*hour"),("W/m²","watt/meter**2"),("W m^-2","watt/meter**2"),("V/m","volt/meter"),("N/C","newton/coulomb"),("C/m²","coulomb/meter**2"),("H","henry"),("mH","millihenry"),("S","siemens"),("℧","siemens"),("mho","siemens"),
("deg/s","degree/second"),("°/s","degree/second"),("rad/min","radian/minute"),("1/min","1/minute"),("Bq","becquerel"),("Ci","curie"),("Gy","gray"),("Sv","sievert"),("ly","light_year"),("pc","parsec"),("AU","astronomical_unit"),("au","astronomical_unit"),("nmi","nautical_mile"),("kn","knot"),("kt","knot"),
("gon","gradian"),("grad","gradian"),("rev/min²","revolutions_per_minute/minute"),("rad·s⁻²","radian/second**2"),("r.p.m.","revolutions_per_minute"),("RPM","revolutions_per_minute"),("cycles per second","hertz"),("revolutions per minute","revolutions_per_minute"),("radians per second","radian/second"),("degrees per second","degree/second"),("m/s/s","meter/second**2"),("kgm/s","kilogram*meter/second"),("kg m/s","kilogram*meter/second"),("kg·m/s","kilogram*meter/second"),("N·s","newton*second"),("N s","newton*second")]
"""(unit as written, its pint name): SI symbols with every separator (IEC/ISO 80000: a space, a half-high dot, a
multiplication dot; negative powers and solidus), NIST SP 811's non-SI units accepted for use with SI (L, atm, eV,
u/Da, au, rpm-style rotational speeds), angular units (rad, mrad, sr, degree, arcminute and arcsecond and their
prime signs, gon, turn), and textbook forms (r/min, RPM, r.p.m., kmph, mho, kgm/s)."""


@pytest.mark.parametrize("text, name", SPELLINGS, ids=[t for t, _ in SPELLINGS])
def test_every_standard_spelling_is_its_pint_unit(text, name):
    """Read as the unit pint names, by dimension and scale (1 of it is 1 of the other), and graded the same."""
    unit = parse_unit(text)
    assert unit is not None, text
    assert (1 * unit).to(name).magnitude == pytest.approx(1.0, rel=1e-9)
    assert same_unit(text, f"{U.Unit(name):~C}")  # and graded as pint's own symbols
