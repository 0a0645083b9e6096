"""Writes the NumPy fixtures that tests/npy.rs loads into tests/data/npy/.

Run from the repository root: python3 crates/genesis/tests/gen_npy_fixtures.py
Values are small and deterministic; tests/npy.rs spells out the values it expects.
"""

import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "npy")
os.makedirs(OUT, exist_ok=True)


def save(name, array):
    np.save(os.path.join(OUT, name), array, allow_pickle=True)


base = np.arange(6, dtype="<i4").reshape(2, 3)  # [[0, 1, 2], [3, 4, 5]]
save("c_i32.npy", base)
save("fortran_i32.npy", np.asfortranarray(base))
save("fortran_f64_3d.npy", np.asfortranarray(np.arange(24, dtype="<f8").reshape(2, 3, 4)))
save("big_f32.npy", np.array([1.5, -2.0, 3.25], dtype=">f4"))
save("big_i64.npy", np.array([[1, -2], [3, 2**40]], dtype=">i8"))
save("big_i16_fortran.npy", np.asfortranarray(base.astype(">i2")))
save("bool.npy", np.array([True, False, True, True]))
save("f16.npy", np.array([0.5, -1.0, 65504.0, 0.0], dtype="<f2"))
save("u8.npy", np.array([0, 1, 255], dtype="u1"))
save("i8.npy", np.array([-128, 0, 127], dtype="i1"))
save("scalar_f64.npy", np.array(3.5))
save("empty_f32.npy", np.zeros((0, 3), dtype="<f4"))
save("object.npy", np.array([1, "two", None], dtype=object))
save("u32.npy", np.array([1, 2], dtype="<u4"))
save("complex.npy", np.array([1 + 2j], dtype="<c8"))
np.savez(os.path.join(OUT, "plain.npz"), w=base, b=np.array([True, False]), s=np.array(7, dtype="<i8"))
np.savez_compressed(os.path.join(OUT, "compressed.npz"), x=np.arange(5, dtype="<f4"), y=np.asfortranarray(base))

# An archive with a member that is not a .npy file, which load_npz refuses.
import zipfile

with zipfile.ZipFile(os.path.join(OUT, "not_npy_member.npz"), "w") as z:
    z.writestr("notes.txt", "not an array")
