"""The ctypes side of the vrampool module, on host memory (no GPU, no PyTorch needed).

Run with the library built, as the Rust test `crates/vrampool-capi/tests/python_module.rs` does:

    VRAMPOOL_LIB=target/debug/libvrampool_c.so PYTHONPATH=python python3 -m unittest discover -s python/tests
"""

import ctypes
import os
import sys
import types
import unittest

import vrampool

MIB = 1 << 20

# The device pools read VRAMPOOL_CONF when the first one is made: host memory, so no GPU is needed.
os.environ.setdefault("VRAMPOOL_CONF", "backend=host")


class DevicePoolStats(unittest.TestCase):
    """`stats()` on the pool the PyTorch entry points make for device 0 (VRAMPOOL_CONF names host memory)."""

    def test_stats_follow_allocations_and_frees(self):
        lib = vrampool.load()
        self.assertEqual(lib.vrampool_device_pool_exists(3), 0)
        with self.assertRaisesRegex(vrampool.VrampoolError, "device 3 has no vrampool pool yet"):
            vrampool.stats(3)

        pointer = lib.vrampool_torch_alloc(5 * MIB, 3, None)
        self.assertTrue(pointer, vrampool.last_error())
        self.assertEqual(pointer % 256, 0)
        before = vrampool.stats(3)
        self.assertEqual(before["device"], 3)
        self.assertIn("backend=host", before["config"])
        self.assertEqual(before["stats"]["allocated_bytes"]["current"], 5 * MIB)
        self.assertGreaterEqual(before["stats"]["reserved_bytes"]["peak"], 5 * MIB)
        self.assertEqual([block["addr"] for block in before["report"]["blocks"]], [pointer])

        lib.vrampool_torch_free(pointer, 5 * MIB, 3, None)
        self.assertEqual(vrampool.last_error(), "")
        after = vrampool.stats(3)
        self.assertEqual(after["stats"]["allocated_bytes"]["current"], 0)
        self.assertEqual(after["stats"]["allocated_bytes"]["peak"], 5 * MIB)
        self.assertEqual(after["stats"]["frees"], 1)
        self.assertGreaterEqual(vrampool.trim(3), 0)
        self.assertGreaterEqual(vrampool.trim(), 0)

        lib.vrampool_torch_free(pointer, 5 * MIB, 3, None)
        self.assertIn("not a live allocation", vrampool.last_error())
        self.assertEqual(vrampool.stats(3)["stats"]["frees"], 1, "a double free changes nothing")

    def test_a_device_out_of_range_is_an_error_not_a_crash(self):
        with self.assertRaisesRegex(vrampool.VrampoolError, "device -2 is not a device ordinal"):
            vrampool.stats(-2)
        with self.assertRaisesRegex(vrampool.VrampoolError, "trim"):
            vrampool.trim(99)


class PoolsThroughTheCApi(unittest.TestCase):
    """A pool made with vrampool_pool_create, used through ctypes."""

    def test_a_host_pool_allocates_frees_and_reports(self):
        lib = vrampool.load()
        pool = lib.vrampool_pool_create(b"strategy=dynamic,backend=host,initial_size=64MiB")
        self.assertTrue(pool, vrampool.last_error())
        try:
            addr = ctypes.c_uint64(0)
            self.assertEqual(lib.vrampool_pool_alloc(pool, 3 * MIB, 0, 0, ctypes.byref(addr)), 0)
            stats = vrampool._take_json(lib.vrampool_pool_stats_json(pool), "pool stats")
            self.assertEqual(stats["strategy"], "dynamic")
            self.assertEqual(stats["stats"]["allocated_bytes"]["current"], 3 * MIB)
            self.assertEqual(lib.vrampool_pool_free(pool, addr.value), 0)
            self.assertEqual(lib.vrampool_pool_free(pool, addr.value), -3, "a double free is NOT_LIVE")
        finally:
            lib.vrampool_pool_destroy(pool)

    def test_a_bad_config_names_the_key(self):
        lib = vrampool.load()
        self.assertFalse(lib.vrampool_pool_create(b"backend=host,growth=fast"))
        self.assertEqual(lib.vrampool_last_error_code(), -5)
        self.assertIn("`growth`", vrampool.last_error())


class FakeTorch:
    """Just enough of `torch` to see what `install` asks of it."""

    def __init__(self, initialized):
        self.calls = []
        memory = types.SimpleNamespace(
            CUDAPluggableAllocator=lambda *args: self.calls.append(("CUDAPluggableAllocator", args)) or "allocator",
            change_current_allocator=lambda allocator: self.calls.append(("change_current_allocator", allocator)),
        )
        self.module = types.ModuleType("torch")
        self.module.cuda = types.SimpleNamespace(is_initialized=lambda: initialized, memory=memory)


class Install(unittest.TestCase):
    """`install()` against a stand-in for PyTorch (the real one runs on the GPU machine)."""

    def tearDown(self):
        sys.modules.pop("torch", None)
        vrampool._allocator = None

    def test_it_swaps_the_allocator_for_vrampools_entry_points(self):
        fake = FakeTorch(initialized=False)
        sys.modules["torch"] = fake.module
        saved = os.environ.get("VRAMPOOL_CONF")
        try:
            self.assertEqual(vrampool.install(conf=saved), "allocator")
            self.assertEqual(os.environ.get("VRAMPOOL_CONF"), saved)
        finally:
            if saved is not None:
                os.environ["VRAMPOOL_CONF"] = saved
        path = str(vrampool.library_path().resolve())
        self.assertEqual(
            fake.calls,
            [
                ("CUDAPluggableAllocator", (path, "vrampool_torch_alloc", "vrampool_torch_free")),
                ("change_current_allocator", "allocator"),
            ],
        )
        self.assertEqual(vrampool.install(), "allocator", "a second call returns the installed allocator")
        self.assertEqual(len(fake.calls), 2)

    def test_it_refuses_once_cuda_is_in_use(self):
        sys.modules["torch"] = FakeTorch(initialized=True).module
        with self.assertRaisesRegex(RuntimeError, "before any CUDA work"):
            vrampool.install()

    def test_without_pytorch_it_says_so(self):
        sys.modules["torch"] = None  # makes `import torch` fail
        with self.assertRaisesRegex(ImportError, "needs PyTorch"):
            vrampool.install()


if __name__ == "__main__":
    unittest.main(verbosity=2)
