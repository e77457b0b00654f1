"""Wave/acoustics, optics and modern-physics problem types (two per domain), each with its diagram."""

from __future__ import annotations

import math
import random

from lit_grpo.tasks.phyx.physics import draw as D
from lit_grpo.tasks.phyx.physics.base import PROBLEMS, Problem, build_options, fmt_num, pick

V_SOUND = 340.0  # m/s
HC = 1240.0  # eV nm


@PROBLEMS.register("standing_wave")
def standing_wave(rng: random.Random) -> Problem:
    n, length, v = rng.randint(1, 5), pick(rng, 0.5, 2.0, 0.1), pick(rng, 40, 200, 10)
    f = n * v / (2 * length)
    answer, wrong, why = build_options(f, [("wavelength taken as L/n", n * v / length),
                                           ("nodes counted instead of loops", (n + 1) * v / (2 * length)),
                                           ("fundamental frequency", v / (2 * length))], "Hz")
    img, d = D.canvas()
    x0, x1, y = 40, 320, 120
    for x in (x0, x1):
        d.rectangle([x - 6, y - 60, x, y + 60] if x == x0 else [x, y - 60, x + 6, y + 60], fill=D.GREY)
    for sign in (1, -1):
        pts = [(x0 + (x1 - x0) * t, y - sign * 45 * math.sin(math.pi * n * t)) for t in [k / 200 for k in range(201)]]
        d.line(pts, fill=D.BLUE if sign > 0 else (150, 170, 230), width=2)
    D.dimension(d, x0, x1, 205, f"L = {fmt_num(length, 2)} m", gap=17)
    D.text(d, ((x0 + x1) / 2, 252), f"wave speed on the string: {fmt_num(v, 3)} m/s", size=13)
    return Problem(
        "Waves/Acoustics", "Standing Waves", ["Spatial Relation Reasoning", "Numerical Reasoning"],
        f"A string of length {fmt_num(length, 2)} m is fixed at both ends and vibrates with {n} loop"
        f"{'s' if n > 1 else ''} between the ends. Waves travel along the string at {fmt_num(v, 3)} m/s.",
        "A string fixed at both ends vibrates in the standing-wave pattern shown in the figure.",
        "What is the frequency of the vibration?",
        answer, wrong, why, img, f"Standing wave with {n} loops on a {length:g} m string, wave speed {v:g} m/s.")


@PROBLEMS.register("doppler")
def doppler(rng: random.Random) -> Problem:
    vs, f, toward = pick(rng, 10, 60, 5), pick(rng, 300, 1000, 50), rng.random() < 0.5
    s = -1 if toward else 1
    fo = f * V_SOUND / (V_SOUND + s * vs)
    answer, wrong, why = build_options(fo, [("sign of the source velocity flipped", f * V_SOUND / (V_SOUND - s * vs)),
                                            ("moving-observer formula", f * (V_SOUND - s * vs) / V_SOUND),
                                            ("no Doppler shift", f)], "Hz")
    img, d = D.canvas()
    src = (150, 130)
    direction = 1 if toward else -1  # observer on the right
    for k in range(1, 6):
        c, r = (src[0] - direction * 12 * k, src[1]), 26 * k
        d.ellipse([c[0] - r, c[1] - r, c[0] + r, c[1] + r], outline=(150, 170, 230), width=1)
    d.ellipse([src[0] - 12, src[1] - 12, src[0] + 12, src[1] + 12], fill=D.RED, outline=D.INK)
    D.arrow(d, (src[0], src[1] + 30), (src[0] + direction * 60, src[1] + 30), fill=D.RED, width=3)
    D.text(d, (src[0] + direction * 30, src[1] + 48), f"{fmt_num(vs, 2)} m/s")
    D.text(d, (src[0], 20), f"siren {fmt_num(f, 3)} Hz")
    ox = 320
    d.ellipse([ox - 8, 95, ox + 8, 111], outline=D.INK, width=2)
    d.line([(ox, 111), (ox, 145), (ox - 10, 165)], fill=D.INK, width=2)
    d.line([(ox, 145), (ox + 10, 165)], fill=D.INK, width=2)
    d.line([(ox - 12, 122), (ox + 12, 122)], fill=D.INK, width=2)
    D.text(d, (ox, 185), "observer")
    d.line([(0, 250), (360, 250)], fill=D.GREY, width=1)
    way = "towards" if toward else "away from"
    return Problem(
        "Waves/Acoustics", "Doppler Effect", ["Spatial Relation Reasoning", "Physical Model Grounding Reasoning"],
        f"A siren emitting {fmt_num(f, 3)} Hz moves at {fmt_num(vs, 2)} m/s {way} a stationary observer. "
        "The speed of sound is 340 m/s.",
        "A moving siren and a stationary observer are shown in the figure. The speed of sound is 340 m/s.",
        "What frequency does the observer hear?",
        answer, wrong, why, img, f"Siren {f:g} Hz moving {way} observer at {vs:g} m/s.")


@PROBLEMS.register("thin_lens")
def thin_lens(rng: random.Random) -> Problem:
    f = rng.randint(5, 15)
    do = rng.randint(math.ceil(1.3 * f), 4 * f)
    di = 1 / (1 / f - 1 / do)
    answer, wrong, why = build_options(di, [("sign error in the lens equation", 1 / (1 / f + 1 / do)),
                                            ("distances subtracted", do - f),
                                            ("image assumed at 2f", 2 * f)], "cm")
    img, d = D.canvas()
    ax, lx = 150, 200
    scale = min(6.0, 170 / do)
    d.line([(10, ax), (350, ax)], fill=D.GREY, width=1)
    d.ellipse([lx - 10, ax - 90, lx + 10, ax + 90], outline=D.BLUE, width=3)
    for sx in (-1, 1):
        fx = lx + sx * f * scale
        d.ellipse([fx - 3, ax - 3, fx + 3, ax + 3], fill=D.INK)
        D.text(d, (fx, ax + 14), "F", size=13)
    ox = lx - do * scale
    D.arrow(d, (ox, ax), (ox, ax - 50), fill=D.RED, width=3)
    D.text(d, (ox, ax - 62), "object")
    D.dimension(d, ox, lx, ax + 45, f"{do} cm")
    D.text(d, (lx, 20), f"converging lens, f = {f} cm")
    return Problem(
        "Optics", "Geometrical Optics", ["Spatial Relation Reasoning", "Numerical Reasoning"],
        f"An object stands {do} cm in front of a thin converging lens of focal length {f} cm.",
        "An object stands in front of the thin converging lens shown in the figure.",
        "How far behind the lens is the image formed?",
        answer, wrong, why, img, f"Object {do} cm in front of a converging lens with focal length {f} cm.")


@PROBLEMS.register("refraction")
def refraction(rng: random.Random) -> Problem:
    medium, n = rng.choice([("water", 1.33), ("oil", 1.44), ("glass", 1.50), ("crown glass", 1.52), ("flint glass", 1.60)])
    t1 = pick(rng, 20, 70, 5)
    t2 = math.degrees(math.asin(math.sin(math.radians(t1)) / n))
    answer, wrong, why = build_options(t2, [("angle divided by n", t1 / n),
                                            ("angle measured from the surface", 90 - t2),
                                            ("no bending", t1)], "deg")
    img, d = D.canvas()
    p = (180, 135)
    d.rectangle([0, 135, 360, 270], fill=(215, 235, 250))
    d.line([(0, 135), (360, 135)], fill=D.INK, width=2)
    D.dashed(d, (180, 15), (180, 255))
    D.arrow(d, D.polar(p, 130, 90 + t1), p, fill=D.RED, width=3)
    d.line([p, D.polar(p, 120, -90 + t2)], fill=D.RED, width=3)
    D.arc(d, p, 40, -90 - t1, -90)
    D.text(d, D.polar(p, 58, 90 + t1 / 2), f"{fmt_num(t1, 2)}°")
    D.arc(d, p, 40, 90 - t2, 90)
    D.text(d, D.polar(p, 66, -90 + t2 / 2), "angle = ?", anchor="lm")
    D.text(d, (20, 20), "air", anchor="lm")
    D.text(d, (20, 250), f"{medium}, n = {n:.2f}", anchor="lm")
    return Problem(
        "Optics", "Refraction", ["Spatial Relation Reasoning", "Physical Model Grounding Reasoning"],
        f"A ray of light in air strikes the flat surface of {medium} (n = {n:.2f}) at {fmt_num(t1, 2)}° from the normal.",
        "A ray of light passes from air into the medium shown in the figure.",
        "What is the angle of refraction, measured from the normal?",
        answer, wrong, why, img, f"Ray from air into {medium} (n = {n}) at {t1:g} degrees from the normal.")


@PROBLEMS.register("photoelectric")
def photoelectric(rng: random.Random) -> Problem:
    while True:
        lam, phi = pick(rng, 200, 450, 10), pick(rng, 2.0, 4.5, 0.1)
        ke = HC / lam - phi
        if ke > 0.2:
            break
    answer, wrong, why = build_options(ke, [("work function added", HC / lam + phi),
                                            ("work function ignored", HC / lam),
                                            ("sign of the energy balance flipped", phi - HC / lam)], "eV")
    img, d = D.canvas()
    d.rectangle([220, 40, 250, 240], fill=(170, 170, 180), outline=D.INK, width=2)
    D.text(d, (235, 255), f"metal, work function {fmt_num(phi, 2)} eV", size=13)
    D.wavy(d, (40, 60), (215, 130))
    D.text(d, (100, 40), f"wavelength {fmt_num(lam, 3)} nm")
    d.ellipse([200, 160, 214, 174], fill=D.BLUE)
    D.text(d, (207, 167), "e", size=11, fill=(255, 255, 255))
    D.arrow(d, (198, 170), (90, 210), fill=D.BLUE, width=2)
    D.text(d, (80, 228), "K_max = ?")
    return Problem(
        "Modern Physics", "Quantum Phenomena", ["Physical Model Grounding Reasoning", "Numerical Reasoning"],
        f"Light of wavelength {fmt_num(lam, 3)} nm falls on a metal whose work function is {fmt_num(phi, 2)} eV.",
        "Light falls on the metal surface shown in the figure and ejects electrons.",
        "What is the maximum kinetic energy of the ejected electrons? (hc = 1240 eV·nm)",
        answer, wrong, why, img, f"Photon of {lam:g} nm on a metal with work function {phi:g} eV.")


@PROBLEMS.register("decay")
def decay(rng: random.Random) -> Problem:
    unit, half = rng.choice([("days", "d"), ("hours", "h"), ("years", "yr")]), rng.randint(2, 8)
    m0, k = pick(rng, 20, 200, 10), rng.choice([1.5, 2, 2.5, 3, 4])
    t = k * half
    m = m0 * 0.5 ** k
    answer, wrong, why = build_options(m, [("linear decay", m0 * max(1 - k / 2, 0.05)),
                                           ("half-life used as mean life", m0 * math.exp(-k)),
                                           ("decayed mass instead of remaining", m0 - m)], "g")
    img, d = D.canvas()
    ox, oy, w, h = 50, 220, 290, 180
    D.arrow(d, (ox, oy), (ox + w + 5, oy), width=2)
    D.arrow(d, (ox, oy), (ox, oy - h - 10), width=2)
    pts = [(ox + w * s, oy - h * 0.5 ** (5 * s)) for s in [i / 100 for i in range(101)]]
    d.line(pts, fill=D.RED, width=3)
    for j in range(1, 6):
        x = ox + w * j / 5
        d.line([(x, oy), (x, oy + 5)], fill=D.INK)
        D.text(d, (x, oy + 15), f"{j * half}", size=12)
    D.text(d, (ox + w / 2, oy + 35), f"t ({unit[0]})", size=13)
    hx, hy = ox + w / 5, oy - h / 2
    D.dashed(d, (ox, hy), (hx, hy), fill=D.INK)
    D.dashed(d, (hx, hy), (hx, oy), fill=D.INK)
    D.text(d, (ox - 5, oy - h), f"{fmt_num(m0, 3)} g", size=12, anchor="rm")
    D.text(d, (ox - 5, hy), f"{fmt_num(m0 / 2, 3)} g", size=12, anchor="rm")
    D.text(d, (ox + 6, oy - h - 20), "mass of isotope", size=13, anchor="lm")
    t_text = f"{t:g} {unit[0]}"
    return Problem(
        "Modern Physics", "Nuclear Physics", ["Numerical Reasoning", "Predictive Reasoning"],
        f"A sample initially holds {fmt_num(m0, 3)} g of a radioactive isotope whose half-life is {half} {unit[0]}.",
        "The graph shows how the mass of a radioactive isotope in a sample decreases with time.",
        f"How much of the isotope remains after {t_text}?",
        answer, wrong, why, img, f"Decay curve from {m0:g} g with half-life {half} {unit[0]}.")
