"""Compares the per-step losses of two training logs (lines `step N  loss X ...`, as
examples/gpt2_train.rs and tests/torch_gpt2_train.py print them) and draws them as an SVG.

    python3 loss_curves.py OURS.log THEIRS.log [OUT.svg] [TITLE]

Prints the steps compared, the largest relative difference |ours - theirs| / |theirs| (and its
step), and the mean of each over the last 50 steps. The SVG (no plotting library needed) has
both curves and their relative difference on a second axis.
"""
import re
import sys


def losses(path):
    out = {}
    for line in open(path):
        m = re.match(r"step\s+(\d+)\s+loss\s+([-+0-9.eE]+|nan|inf)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def svg(steps, a, b, path, title):
    w, h, l, r, t, bm = 900, 420, 60, 60, 40, 50
    lo, hi = min(a + b), max(a + b)
    rel = [abs(x - y) / abs(y) for x, y in zip(a, b)]
    rhi = max(rel) or 1e-12
    n = max(steps)
    X = lambda s: l + (w - l - r) * s / max(n, 1)
    Y = lambda v: t + (h - t - bm) * (hi - v) / max(hi - lo, 1e-12)
    R = lambda v: t + (h - t - bm) * (1 - v / rhi)
    line = lambda ys, f: " ".join("%.1f,%.1f" % (X(s), f(v)) for s, v in zip(steps, ys))
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (w, h),
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="%d" y="22" font-size="14">%s</text>' % (l, title),
        '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (l, h - bm, w - r, h - bm),
        '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (l, t, l, h - bm),
    ]
    for i in range(6):
        v = lo + (hi - lo) * i / 5
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (l - 5, Y(v) + 4, v))
        rv = rhi * i / 5
        parts.append('<text x="%d" y="%.1f" fill="gray">%.1e</text>' % (w - r + 5, R(rv) + 4, rv))
        s = n * i / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(s), h - bm + 16, s))
    parts.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((w + l - r) // 2, h - 12))
    parts.append('<polyline fill="none" stroke="lightgray" points="%s"/>' % line(rel, R))
    parts.append('<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="%s"/>' % line(b, Y))
    parts.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" stroke-dasharray="4 2" points="%s"/>' % line(a, Y))
    parts.append('<text x="%d" y="%d" fill="#1f77b4">Genesis (dashed)</text>' % (w - r - 330, t + 14))
    parts.append('<text x="%d" y="%d" fill="#d62728">PyTorch</text>' % (w - r - 200, t + 14))
    parts.append('<text x="%d" y="%d" fill="gray">relative difference (right axis)</text>' % (w - r - 330, t + 30))
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts) + "\n")


def main():
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    steps = sorted(set(a) & set(b))
    if not steps:
        sys.exit("no common steps")
    xa, xb = [a[s] for s in steps], [b[s] for s in steps]
    rel = [abs(x - y) / abs(y) for x, y in zip(xa, xb)]
    i = max(range(len(rel)), key=rel.__getitem__)
    tail = steps[-50:]
    print("steps %d..%d: largest relative difference %.3g (step %d); mean of the last %d: %.4f against %.4f"
          % (steps[0], steps[-1], rel[i], steps[i], len(tail), sum(a[s] for s in tail) / len(tail), sum(b[s] for s in tail) / len(tail)))
    if len(sys.argv) > 3:
        svg(steps, xa, xb, sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "loss")


if __name__ == "__main__":
    main()
