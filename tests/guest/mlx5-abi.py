#!/usr/bin/python3
# rmlx5's checks of mlx5_ib's user ABI (drivers/rmlx5/ib_user.c), driven
# through ib_uverbs' write() commands with hand-made driver data, the bytes
# libmlx5 would send, and bad variants of them. Each case prints a marker:
#   rmlx5-test: PASS|FAIL mlx5abi_<case>
# Not covered here: bad alloc_ucontext requests. Every alloc_ucontext that
# fails leaks a reference to the calling task on 7.3 (ib_init_ucontext's
# error path), which kmemleak would then report against this program.
import ctypes
import errno
import mmap
import os
import struct
import sys

GET_CONTEXT, ALLOC_PD, DEALLOC_PD = 0, 3, 4
CREATE_CQ, DESTROY_CQ, POLL_CQ, CREATE_QP, DESTROY_QP = 18, 20, 21, 24, 27
QPT_RC = 2
U64 = (1 << 64) - 1

libc = ctypes.CDLL(None, use_errno=True)
failures = 0


def mark(name, ok, why=""):
    global failures
    if ok:
        print(f"rmlx5-test: PASS mlx5abi_{name}")
    else:
        failures += 1
        print(f"rmlx5-test: FAIL mlx5abi_{name}: {why}")
    sys.stdout.flush()


class Buf:
    """Memory whose address the kernel is given."""

    def __init__(self, size):
        self.raw = ctypes.create_string_buffer(size)
        self.addr = ctypes.addressof(self.raw)

    def bytes(self, n):
        return self.raw.raw[:n]


def command(fd, cmd, core_in, drv_in, core_out, drv_out):
    """One write() command: header, core struct (its first field the
    response address), driver data. Returns (errno, core reply, driver
    reply)."""
    resp = Buf(core_out + drv_out + 8)
    body = struct.pack("<Q", resp.addr) + core_in + drv_in
    hdr = struct.pack("<IHH", cmd, (8 + len(body)) // 4, (core_out + drv_out) // 4)
    data = hdr + body
    n = libc.write(fd, data, len(data))
    err = 0 if n == len(data) else ctypes.get_errno()
    raw = resp.bytes(core_out + drv_out)
    return err, raw[:core_out], raw[core_out:]


def ucontext_req(total=16, low=4, flags=0, cqe_version=1, lib_caps=3):
    return struct.pack("<IIIIBBHIQ", total, low, flags, 0, cqe_version, 0, 0, 0, lib_caps)


def cq_req(buf, db, cqe_size=64, comp=0, fmt=0, flags=0, uar=0, r0=0, r1=0, tail=b""):
    return struct.pack("<QQIBBHHHI", buf, db, cqe_size, comp, fmt, flags, uar, r0, r1) + tail


def qp_req(buf, db, sq, rq, shift, flags=0, uidx=0xFFFFFF, bfreg=0, sq_buf=0, ece=0, dci=0):
    return struct.pack("<QQIIIIIIQIHH", buf, db, sq, rq, shift, flags, uidx, bfreg, sq_buf,
                       ece, dci, 0)


def aligned(size, align=4096):
    m = mmap.mmap(-1, size + align)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return m, (base + align - 1) & ~(align - 1)


def fenced(size, reserve=512 << 20):
    """`size` bytes of memory (page aligned) followed by a reserved range
    that faults (PROT_NONE) up to `reserve` bytes in all: a fuzzed
    address or length that runs past the buffer names no memory of this
    process (ib_umem_get then fails with EFAULT) rather than its heap,
    which the driver would then write into (a doorbell record's initial
    words, CQEs) as it writes into any memory it is given. Returns the
    address; the mapping stays until exit."""
    mm = libc.mmap
    mm.restype = ctypes.c_void_p
    mm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int, ctypes.c_long]
    # Protection 0: PROT_NONE (which Python's mmap module does not name).
    base = mm(None, reserve, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of the fuzzer's memory failed")
    mp = libc.mprotect
    mp.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if mp(base, size, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of the fuzzer's memory failed")
    return base


def main():
    dev = sys.argv[1] if len(sys.argv) > 1 else "/dev/infiniband/uverbs0"
    fd = os.open(dev, os.O_RDWR)
    err, core, drv = command(fd, GET_CONTEXT, b"", ucontext_req(), 8, 72)
    mark("get_context", err == 0, f"errno {err}")
    if err:
        return
    tot_bfregs = struct.unpack_from("<I", drv, 8)[0]
    mark("context_static_uars", tot_bfregs == 16, f"tot_bfregs {tot_bfregs}")

    err, core, drv = command(fd, ALLOC_PD, b"", b"", 4, 4)
    pd = struct.unpack_from("<I", core)[0] if not err else None
    mark("alloc_pd", err == 0, f"errno {err}")

    ring_map, ring = aligned(64 * 64)
    db_map, db = aligned(4096)

    def create_cq(drv_in, cqe=63):
        core_in = struct.pack("<QIIiI", 0x1234, cqe, 0, -1, 0)
        return command(fd, CREATE_CQ, core_in, drv_in, 8, 8)

    cases = [
        ("cq_cqe_size_128", cq_req(ring, db, cqe_size=128), errno.EOPNOTSUPP),
        ("cq_cqe_size_32", cq_req(ring, db, cqe_size=32), errno.EINVAL),
        ("cq_compression", cq_req(ring, db, comp=1), errno.EOPNOTSUPP),
        ("cq_flags", cq_req(ring, db, flags=1 << 2), errno.EOPNOTSUPP),
        ("cq_reserved", cq_req(ring, db, r1=1), errno.EINVAL),
        ("cq_uar_page_index", cq_req(ring, db, uar=1), errno.EINVAL),
        ("cq_short", cq_req(ring, db)[:16], errno.EINVAL),
        ("cq_tail_not_zero", cq_req(ring, db, tail=b"\x01" + b"\0" * 7), errno.EINVAL),
        ("cq_misaligned_ring", cq_req(ring + 8, db), errno.EINVAL),
        ("cq_misaligned_record", cq_req(ring, db + 4), errno.EINVAL),
        ("cq_unmapped_ring", cq_req(0x10000, db), errno.EFAULT),
    ]
    for name, drv_in, want in cases:
        err, core, _ = create_cq(drv_in)
        mark(name, err == want, f"errno {err}, wanted {want}")
        if not err:
            command(fd, DESTROY_CQ, struct.pack("<II", struct.unpack_from("<I", core)[0], 0),
                    b"", 8, 0)
    err, core, drv = create_cq(cq_req(ring, db))
    mark("create_cq", err == 0, f"errno {err}")
    if err:
        return
    cq = struct.unpack_from("<I", core)[0]
    # The kernel's poll and arm are not for this CQ: libmlx5 polls it.
    err, _, _ = command(fd, POLL_CQ, struct.pack("<II", cq, 1), b"", 8 + 48, 0)
    mark("poll_user_cq_refused", err == errno.EOPNOTSUPP, f"errno {err}")

    qbuf_map, qbuf = aligned(16 * 64 + 16 * 16)
    qdb = db + 64

    def create_qp(drv_in):
        core_in = struct.pack("<QIIIIIIIIIBBBB", 0x5678, pd, cq, cq, 0, 16, 16, 1, 1, 0, 0,
                              QPT_RC, 0, 0)
        return command(fd, CREATE_QP, core_in, drv_in, 32, 40)

    cases = [
        ("qp_unknown_flag", qp_req(qbuf, qdb, 16, 16, 4, flags=1 << 20), errno.EINVAL),
        ("qp_dct", qp_req(qbuf, qdb, 16, 16, 4, flags=1 << 4), errno.EOPNOTSUPP),
        ("qp_bfreg_out_of_range", qp_req(qbuf, qdb, 16, 16, 4, flags=1 << 3, bfreg=4096),
         errno.EINVAL),
        ("qp_ece", qp_req(qbuf, qdb, 16, 16, 4, ece=0x10000000), errno.EOPNOTSUPP),
        ("qp_sq_not_power_of_two", qp_req(qbuf, qdb, 12, 16, 4), errno.EINVAL),
        ("qp_rq_stride_too_small", qp_req(qbuf, qdb, 16, 16, 3), errno.EINVAL),
        ("qp_misaligned_buffer", qp_req(qbuf + 16, qdb, 16, 16, 4), errno.EINVAL),
        ("qp_unmapped_buffer", qp_req(0x10000, qdb, 16, 16, 4), errno.EFAULT),
    ]
    for name, drv_in, want in cases:
        err, core, _ = create_qp(drv_in)
        mark(name, err == want, f"errno {err}, wanted {want}")
        if not err:
            command(fd, DESTROY_QP, struct.pack("<II", struct.unpack_from("<I", core)[0], 0),
                    b"", 8, 0)
    err, core, drv = create_qp(qp_req(qbuf, qdb, 16, 16, 4))
    ok = err == 0 and struct.unpack_from("<I", drv)[0] == 0
    mark("create_qp", ok, f"errno {err}")
    if not err:
        qp = struct.unpack_from("<I", core)[0]
        err, _, _ = command(fd, DESTROY_QP, struct.pack("<II", qp, 0), b"", 8, 0)
        mark("destroy_qp", err == 0, f"errno {err}")
    err, _, _ = command(fd, DESTROY_CQ, struct.pack("<II", cq, 0), b"", 8, 0)
    mark("destroy_cq", err == 0, f"errno {err}")
    # mmap offsets (in pages): command << 8 | index. The context has 8 UAR
    # pages (16 bfregs, two per page).
    for name, pgoff, want in [
        ("mmap_uar_page", 7, 0),
        ("mmap_index_past_the_pages", 8, errno.EINVAL),
        ("mmap_contiguous_pages", 1 << 8, errno.ENOSYS),
        ("mmap_core_clock", 5 << 8, errno.EOPNOTSUPP),
        ("mmap_dynamic_uar", 6 << 8, errno.EOPNOTSUPP),
        ("mmap_unknown_command", 9 << 8, errno.EINVAL),
    ]:
        try:
            m = mmap.mmap(fd, 4096, offset=pgoff * 4096)
            m.close()
            err = 0
        except OSError as e:
            err = e.errno
        mark(name, err == want, f"errno {err}, wanted {want}")
    # A store to a UAR page that is not a doorbell the fault handler
    # completes (16 bytes: a vector store) maps the page, and the bytes are
    # there when read back (rdma-core.sh checks the trap's counters).
    m = mmap.mmap(fd, 4096, offset=7 * 4096)
    pattern = bytes(range(0x40, 0x50))
    m[0x800:0x810] = pattern
    back = m[0x800:0x810]
    m.close()
    mark("uar_page_vector_store", back == pattern, f"read back {back.hex()}")
    # DEALLOC_PD has no response address.
    data = struct.pack("<IHHI", DEALLOC_PD, 3, 0, pd)
    n = libc.write(fd, data, len(data))
    err = 0 if n == len(data) else ctypes.get_errno()
    mark("dealloc_pd", err == 0, f"errno {err}")
    os.close(fd)
    # The mappings stay until exit (ctypes holds views of them).
    _ = (ring_map, db_map, qbuf_map)


def fuzz(dev, calls, seed):
    """make stress: random driver data for CREATE_CQ and CREATE_QP (good
    requests with fields, lengths and addresses changed at random), random
    destroys and random mmap offsets, in one context, closed at the end
    (ib_uverbs then destroys what is left). Prints a @@STRESS line; the
    caller checks that nothing is left behind."""
    import collections
    import random
    rng = random.Random(seed)
    fd = os.open(dev, os.O_RDWR)
    err, _, _ = command(fd, GET_CONTEXT, b"", ucontext_req(), 8, 72)
    if err:
        print(f"mlx5-abi: fuzz: GET_CONTEXT failed: {err}")
        return False
    err, core, _ = command(fd, ALLOC_PD, b"", b"", 4, 4)
    pd = struct.unpack_from("<I", core)[0]
    # Every address below, and a doorbell record 63 pages on from it, lies
    # in the first 128 pages; a ring may reach 4 MiB beyond. Longer ones
    # run into the fence.
    mem = fenced(8 << 20)
    addrs = [mem, mem + 4096, mem + 8, mem + 64 * 4096 - 64, 0, 0x10000, 0xFFFFFFFFFFFFF000]
    errnos = collections.Counter()
    cqs, qps = [], []
    ops = collections.Counter()

    def mutate(b):
        b = bytearray(b)
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([0, 1, 0xFF, rng.randrange(256)])
        if rng.random() < 0.2:
            b = b[:rng.randrange(len(b) + 1)]
        elif rng.random() < 0.1:
            b += bytes(rng.choice([1, 0]) for _ in range(rng.randrange(1, 17)))
        return bytes(b)

    for _ in range(calls):
        op = rng.choice(["cq", "cq", "qp", "qp", "destroy", "mmap"])
        ops[op] += 1
        if op == "cq":
            drv = mutate(cq_req(rng.choice(addrs), (rng.choice(addrs) + 4096 * 63) & U64))
            cqe = rng.choice([1, 7, 63, 64, 4095, 65535, 65536, 1 << 22])
            core_in = struct.pack("<QIIiI", 0, cqe, rng.choice([0, 0, 1, 99]), -1, 0)
            err, core, _ = command(fd, CREATE_CQ, core_in, drv, 8, 8)
            if not err:
                cqs.append(struct.unpack_from("<I", core)[0])
        elif op == "qp" and cqs:
            cq = rng.choice(cqs)
            drv = mutate(qp_req(rng.choice(addrs), (rng.choice(addrs) + 4096 * 62) & U64,
                                rng.choice([1, 4, 16, 12, 1 << 15, 1 << 16]),
                                rng.choice([0, 1, 16, 3, 1 << 15]), rng.choice([3, 4, 6, 9, 31])))
            core_in = struct.pack("<QIIIIIIIIIBBBB", 0, pd, cq, rng.choice(cqs), 0,
                                  rng.choice([1, 16, 5000]), rng.choice([0, 16]), 1, 1,
                                  rng.choice([0, 64]), 0, rng.choice([QPT_RC, QPT_RC, 3, 4]),
                                  0, 0)
            err, core, _ = command(fd, CREATE_QP, core_in, drv, 32, 40)
            if not err:
                qps.append(struct.unpack_from("<I", core)[0])
        elif op == "destroy" and (cqs or qps):
            if qps and rng.random() < 0.6:
                h = qps.pop(rng.randrange(len(qps)))
                err, _, _ = command(fd, DESTROY_QP, struct.pack("<II", h, 0), b"", 8, 0)
            else:
                h = cqs.pop(rng.randrange(len(cqs)))
                err, _, _ = command(fd, DESTROY_CQ, struct.pack("<II", h, 0), b"", 8, 0)
                if err:
                    cqs.append(h)
        elif op == "mmap":
            pgoff = rng.choice([0, 1, 7, 8, 255, 0x100, 0x200, 0x300, 0x500, 0x700, 0x10000])
            try:
                m = mmap.mmap(fd, 4096 * rng.choice([1, 1, 2]), offset=pgoff * 4096)
                m[0x800:0x808] = b"\0" * 8
                m.close()
                err = 0
            except (OSError, ValueError, IndexError) as e:
                err = getattr(e, "errno", None) or errno.EINVAL
        else:
            err = 0
        errnos[errno.errorcode.get(err, str(err)) if err else "ok"] += 1
    os.close(fd)
    print("@@STRESS mlx5fuzz calls=%d seed=%d ops=%s results=%s" % (
        calls, seed, ",".join(f"{k}:{v}" for k, v in sorted(ops.items())),
        ",".join(f"{k}:{v}" for k, v in sorted(errnos.items()))))
    return True


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--fuzz":
        seed = int(sys.argv[4], 0) if len(sys.argv) > 4 else int.from_bytes(os.urandom(4), "little")
        sys.exit(0 if fuzz(sys.argv[1], int(sys.argv[3]), seed) else 1)
    main()
    sys.exit(1 if failures else 0)
