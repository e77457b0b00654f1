"""Mechanics, electromagnetism and thermodynamics problem types (two per domain), each with its diagram."""

from __future__ import annotations

import math
import random

from lit_grpo.tasks.phyx.physics import draw as D
from lit_grpo.tasks.phyx.physics.base import G, PROBLEMS, Problem, build_options, fmt_num, pick

K_E = 8.99e9  # Coulomb constant, N m^2 / C^2
C_WATER = 4186.0  # J / (kg K)


@PROBLEMS.register("inclined_plane")
def inclined_plane(rng: random.Random) -> Problem:
    theta, mu, m = pick(rng, 20, 50, 5), pick(rng, 0.1, 0.3, 0.05), pick(rng, 1, 5, 0.5)
    s, c = math.sin(math.radians(theta)), math.cos(math.radians(theta))
    a = G * (s - mu * c)
    answer, wrong, why = build_options(a, [("friction sign flipped", G * (s + mu * c)),
                                           ("sin and cos swapped", G * (c - mu * s)),
                                           ("friction ignored", G * s)], "m/s^2")
    img, d = D.canvas()
    w = min(280.0, 190 / math.tan(math.radians(theta)))
    base, top = (320 - w, 230), (320, 230 - w * math.tan(math.radians(theta)))
    d.polygon([base, (320, 230), top], outline=D.INK, fill=(235, 235, 235), width=2)
    D.arc(d, base, 45, -theta, 0)
    D.text(d, D.polar(base, 64, theta / 2), f"{fmt_num(theta, 2)}°")
    mid = D.polar(base, 0.45 * w / c, theta)
    block = [D.polar(mid, 0, 0), D.polar(mid, 40, theta), D.polar(D.polar(mid, 40, theta), 30, theta + 90),
             D.polar(mid, 30, theta + 90)]
    d.polygon(block, fill=(120, 160, 230), outline=D.INK)
    D.text(d, D.polar(mid, 36, theta + 110), f"{fmt_num(m, 2)} kg", size=13)
    D.arrow(d, D.polar(mid, -10, theta), D.polar(mid, -60, theta), fill=D.RED)
    D.text(d, (250, 250), f"friction coefficient {mu:.2f}", size=13)
    return Problem(
        "Mechanics", "Dynamics", ["Physical Model Grounding Reasoning", "Multi-Formula Reasoning"],
        f"A block of mass {fmt_num(m, 2)} kg is released from rest on a rough plane inclined at {fmt_num(theta, 2)}° "
        f"to the horizontal. The coefficient of kinetic friction between the block and the plane is {mu:.2f}.",
        "A block is released from rest on the rough inclined plane shown in the figure.",
        "What is the magnitude of the block's acceleration down the plane? (g = 9.8 m/s^2)",
        answer, wrong, why, img, f"A block on a plane inclined at {theta:g} degrees, friction coefficient {mu:.2f}.")


@PROBLEMS.register("projectile")
def projectile(rng: random.Random) -> Problem:
    v, theta = pick(rng, 10, 30, 2), pick(rng, 20, 70, 5)
    r2 = math.radians(theta)
    rng_ = v ** 2 * math.sin(2 * r2) / G
    answer, wrong, why = build_options(rng_, [("sin(theta) instead of sin(2 theta)", v ** 2 * math.sin(r2) / G),
                                              ("maximum height instead of range", v ** 2 * math.sin(r2) ** 2 / (2 * G)),
                                              ("half the flight time", rng_ / 2)], "m")
    img, d = D.canvas()
    x0, y0, span = 40, 215, 280
    d.line([(20, y0), (340, y0)], fill=D.INK, width=2)
    h = span / 4 * math.tan(r2)
    scale = min(1.0, 150 / h)
    pts = [(x0 + span * t, y0 - scale * 4 * h * t * (1 - t)) for t in [k / 40 for k in range(41)]]
    for a, b in zip(pts[::2], pts[1::2]):
        d.line([a, b], fill=D.GREY, width=2)
    launch = math.degrees(math.atan(scale * math.tan(r2)))
    D.arrow(d, (x0, y0), D.polar((x0, y0), 70, launch), fill=D.RED, width=3)
    D.text(d, D.polar((x0, y0), 88, launch + 8), f"v = {fmt_num(v, 2)} m/s")
    D.arc(d, (x0, y0), 32, -launch, 0)
    D.text(d, (x0 + 48, y0 - 12), f"{fmt_num(theta, 2)}°", size=13)
    D.arrow(d, (x0 + span / 2, y0 + 25), (x0 + span, y0 + 25), width=1, head=7)
    D.arrow(d, (x0 + span / 2, y0 + 25), (x0, y0 + 25), width=1, head=7)
    D.text(d, (x0 + span / 2, y0 + 40), "R = ?")
    return Problem(
        "Mechanics", "Kinematics", ["Spatial Relation Reasoning", "Multi-Formula Reasoning"],
        f"A ball is launched from level ground at {fmt_num(v, 2)} m/s, {fmt_num(theta, 2)}° above the horizontal. "
        "Air resistance is negligible.",
        "A ball is launched from level ground as shown in the figure. Air resistance is negligible.",
        "How far from the launch point does the ball land? (g = 9.8 m/s^2)",
        answer, wrong, why, img, f"Projectile launched at {v:g} m/s and {theta:g} degrees over level ground.")


@PROBLEMS.register("circuit")
def circuit(rng: random.Random) -> Problem:
    emf, r1, r2, r3 = rng.choice([6, 9, 12, 24]), rng.randint(2, 10), rng.randint(3, 12), rng.randint(3, 12)
    par = r2 * r3 / (r2 + r3)
    i = emf / (r1 + par)
    answer, wrong, why = build_options(i, [("parallel pair treated as series", emf / (r1 + r2 + r3)),
                                           ("reciprocal of the parallel sum not taken", emf / (r1 + (r2 + r3) / (r2 * r3))),
                                           ("only R1 counted", emf / r1)], "A")
    img, d = D.canvas()
    left, right, top, bottom = 60, 200, 50, 220
    d.line([(left, top), (left, 115)], fill=D.INK, width=2)
    d.line([(left, 155), (left, bottom), (right, bottom)], fill=D.INK, width=2)
    d.line([(left - 18, 115), (left + 18, 115)], fill=D.INK, width=3)  # battery: long plate (+)
    d.line([(left - 9, 155 - 25), (left + 9, 155 - 25)], fill=D.INK, width=5)
    d.line([(left, 130), (left, 155)], fill=D.INK, width=2)
    D.text(d, (left - 30, 135), f"{emf} V", anchor="rm")
    d.line([(left, top), (100, top)], fill=D.INK, width=2)
    D.resistor(d, (100, top), (170, top), f"R1 = {r1} ohm")
    d.line([(170, top), (right, top)], fill=D.INK, width=2)
    for x, r, name, side in ((right, r2, "R2", -1), (right + 70, r3, "R3", 1)):
        d.line([(x, top), (x, 100)], fill=D.INK, width=2)
        D.resistor(d, (x, 100), (x, 170), "", horizontal=False)
        D.text(d, (x + side * 14, 135), f"{name} = {r} ohm", size=13, anchor="lm" if side > 0 else "rm")
        d.line([(x, 170), (x, bottom)], fill=D.INK, width=2)
    d.line([(right, top), (right + 70, top)], fill=D.INK, width=2)
    d.line([(right, bottom), (right + 70, bottom)], fill=D.INK, width=2)
    return Problem(
        "Electromagnetism", "Circuits", ["Spatial Relation Reasoning", "Multi-Formula Reasoning"],
        f"An ideal {emf} V battery drives a circuit in which R1 = {r1} Ω is in series with the parallel pair "
        f"R2 = {r2} Ω and R3 = {r3} Ω.",
        "An ideal battery drives the resistor network shown in the figure.",
        "What current flows through the battery?",
        answer, wrong, why, img, f"Battery {emf} V, R1 {r1} ohm in series with R2 {r2} ohm parallel R3 {r3} ohm.")


@PROBLEMS.register("field_lines")
def field_lines(rng: random.Random) -> Problem:
    q, r_cm, sign = pick(rng, 1, 9, 0.5), rng.randint(5, 30), rng.choice([1, -1])
    r = r_cm / 100
    e = K_E * q * 1e-6 / r ** 2
    answer, wrong, why = build_options(e, [("distance left in cm", K_E * q * 1e-6 / r_cm ** 2),
                                           ("charge left in microcoulombs", K_E * q / r ** 2),
                                           ("distance not squared", K_E * q * 1e-6 / r)], "N/C")
    img, d = D.canvas()
    c = (110, 135)
    for k in range(12):
        ang = 30 * k + 15
        a, b = D.polar(c, 26, ang), D.polar(c, 100, ang)
        D.arrow(d, a, b, fill=D.BLUE, width=1, head=7) if sign > 0 else D.arrow(d, b, a, fill=D.BLUE, width=1, head=7)
    d.ellipse([c[0] - 18, c[1] - 18, c[0] + 18, c[1] + 18], fill=D.RED if sign > 0 else D.BLUE, outline=D.INK)
    D.text(d, c, "+" if sign > 0 else "-", size=22, fill=(255, 255, 255))
    D.text(d, (c[0], c[1] + 118), f"q = {'+' if sign > 0 else '-'}{fmt_num(q, 2)} uC")
    p = (320, 135)
    d.ellipse([p[0] - 4, p[1] - 4, p[0] + 4, p[1] + 4], fill=D.INK)
    D.text(d, (p[0], p[1] - 16), "P")
    D.dashed(d, (c[0] + 20, 160), (p[0], 160), fill=D.INK)
    D.text(d, ((c[0] + p[0]) / 2 + 20, 174), f"r = {r_cm} cm")
    return Problem(
        "Electromagnetism", "Electrostatics", ["Physical Model Grounding Reasoning", "Numerical Reasoning"],
        f"A point charge of {'+' if sign > 0 else '-'}{fmt_num(q, 2)} μC sits in vacuum. Point P is {r_cm} cm "
        "from the charge.",
        "The figure shows the field lines of a point charge and a point P.",
        "What is the magnitude of the electric field at P? (k = 8.99 × 10^9 N·m^2/C^2)",
        answer, wrong, why, img, f"Point charge {sign * q:g} microcoulomb with field lines, P at {r_cm} cm.")


@PROBLEMS.register("heat_engine")
def heat_engine(rng: random.Random) -> Problem:
    th, tc, qh = pick(rng, 300, 600, 25), pick(rng, 20, 100, 10), pick(rng, 1, 5, 0.1)
    eff = 1 - (tc + 273.15) / (th + 273.15)
    w = qh * 1000 * eff
    answer, wrong, why = build_options(w, [("Celsius temperatures in the efficiency", qh * 1000 * (1 - tc / th)),
                                           ("cold-to-hot ratio instead of efficiency", qh * 1000 * (tc + 273.15) / (th + 273.15)),
                                           ("kJ not converted to J", qh * eff)], "J")
    img, d = D.canvas()
    d.rectangle([90, 15, 270, 60], fill=(250, 200, 190), outline=D.INK, width=2)
    D.text(d, (180, 37), f"Hot reservoir {fmt_num(th, 3)} °C")
    d.rectangle([90, 210, 270, 255], fill=(190, 210, 250), outline=D.INK, width=2)
    D.text(d, (180, 232), f"Cold reservoir {fmt_num(tc, 2)} °C")
    d.ellipse([145, 100, 215, 170], fill=(235, 235, 235), outline=D.INK, width=2)
    D.text(d, (180, 135), "Engine")
    D.arrow(d, (180, 60), (180, 100), fill=D.RED, width=3)
    D.text(d, (190, 80), f"Q_H = {fmt_num(qh, 2)} kJ", anchor="lm")
    D.arrow(d, (180, 170), (180, 210), fill=D.BLUE, width=3)
    D.text(d, (190, 190), "Q_C", anchor="lm")
    D.arrow(d, (215, 135), (290, 135), fill=D.INK, width=3)
    D.text(d, (300, 135), "W = ?", anchor="lm")
    return Problem(
        "Thermodynamics", "Laws of Thermodynamics", ["Implicit Condition Reasoning", "Numerical Reasoning"],
        f"A reversible (Carnot) engine works between a hot reservoir at {fmt_num(th, 3)} °C and a cold reservoir "
        f"at {fmt_num(tc, 2)} °C, absorbing {fmt_num(qh, 2)} kJ of heat from the hot reservoir per cycle.",
        "A reversible engine works between the two reservoirs shown in the figure.",
        "How much work does the engine do per cycle?",
        answer, wrong, why, img, f"Carnot engine between {th:g} C and {tc:g} C absorbing {qh:g} kJ per cycle.")


@PROBLEMS.register("calorimetry")
def calorimetry(rng: random.Random) -> Problem:
    metal, c1 = rng.choice([("aluminium", 900.0), ("copper", 385.0), ("iron", 450.0)])
    m1, t1, m2, t2 = pick(rng, 100, 500, 50), pick(rng, 80, 200, 10), pick(rng, 200, 800, 50), pick(rng, 10, 30, 1)
    tf = (m1 * c1 * t1 + m2 * C_WATER * t2) / (m1 * c1 + m2 * C_WATER)
    answer, wrong, why = build_options(tf, [
        ("plain average of the temperatures", (t1 + t2) / 2),
        ("specific heats ignored", (m1 * t1 + m2 * t2) / (m1 + m2)),
        ("specific heats swapped", (m1 * C_WATER * t1 + m2 * c1 * t2) / (m1 * C_WATER + m2 * c1)),
        ("block assumed not to cool", t2 + m1 * c1 * (t1 - t2) / (m2 * C_WATER))], "°C")
    img, d = D.canvas()
    d.line([(130, 110), (130, 250), (290, 250), (290, 110)], fill=D.INK, width=3)
    d.rectangle([132, 150, 288, 248], fill=(190, 215, 250))
    D.text(d, (210, 200), f"water {fmt_num(m2, 3)} g")
    D.text(d, (210, 222), f"{fmt_num(t2, 2)} °C")
    d.rectangle([185, 40, 235, 85], fill=(180, 180, 180), outline=D.INK, width=2)
    D.text(d, (245, 52), f"{metal} {fmt_num(m1, 3)} g", anchor="lm")
    D.text(d, (245, 72), f"{fmt_num(t1, 3)} °C", anchor="lm")
    D.arrow(d, (210, 90), (210, 140), fill=D.RED, width=2)
    d.rounded_rectangle([60, 60, 74, 230], radius=7, outline=D.INK, width=2)
    d.ellipse([55, 222, 79, 246], fill=D.RED, outline=D.INK)
    D.text(d, (67, 45), "T = ?")
    return Problem(
        "Thermodynamics", "Heat Transfer", ["Multi-Formula Reasoning", "Implicit Condition Reasoning"],
        f"A {fmt_num(m1, 3)} g block of {metal} (specific heat {c1:.0f} J/(kg·K)) at {fmt_num(t1, 3)} °C is dropped "
        f"into {fmt_num(m2, 3)} g of water at {fmt_num(t2, 2)} °C in an insulated container.",
        f"A hot block of {metal} (specific heat {c1:.0f} J/(kg·K)) is dropped into the water in the insulated "
        "container shown in the figure.",
        "What is the final temperature of the water and block? (water: 4186 J/(kg·K))",
        answer, wrong, why, img, f"{metal} block {m1:g} g at {t1:g} C dropped into {m2:g} g water at {t2:g} C.")
