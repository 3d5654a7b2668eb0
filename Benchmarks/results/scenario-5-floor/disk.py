import os, time, sys, ctypes
d = sys.argv[1]; mode = sys.argv[2]; n = 200
buf = os.urandom(1 << 20)
libc = ctypes.CDLL(None)
t0 = time.perf_counter()
fds = []
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, buf)
    if mode == "each": os.fdatasync(fd)
    if mode == "each+dir":
        os.fdatasync(fd); dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
    fds.append(fd)
if mode == "syncfs": libc.syncfs(fds[0])
if mode == "allthen":
    for fd in fds: os.fdatasync(fd)
t1 = time.perf_counter()
for fd in fds: os.close(fd)
print(mode, round(t1 - t0, 4))
