"""Minimal GGUF reader for the reference scripts (metadata of every type, F32/F16/BF16
tensors as numpy arrays). Independent of the C++ reader on purpose: it is what the engine is
checked against. Needs numpy (Debian's python3-numpy; run with /usr/bin/python3)."""
import struct

import numpy as np

_SCALARS = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?',
            10: '<Q', 11: '<q', 12: '<d'}


class Gguf:
    def __init__(self, path):
        with open(path, 'rb') as f:
            self.buf = f.read()
        self.pos = 0
        magic, version, n_tensors, n_kv = self._unpack('<IIQQ')
        if magic != 0x46554747 or version not in (2, 3):
            raise ValueError('%s: not a GGUF v2/v3 file' % path)
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack('<I')
            self.meta[key] = self._value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack('<I')
            dims = self._unpack('<%dq' % n_dims)
            ttype, offset = self._unpack('<IQ')
            infos.append((name, dims, ttype, offset))
        align = self.meta.get('general.alignment', 32)
        data = (self.pos + align - 1) // align * align
        self.tensors = {}
        for name, dims, ttype, offset in infos:
            n = int(np.prod(dims))
            start = data + offset
            if ttype == 0:
                a = np.frombuffer(self.buf, np.float32, n, start)
            elif ttype == 1:
                a = np.frombuffer(self.buf, np.float16, n, start).astype(np.float32)
            elif ttype == 30:
                u = np.frombuffer(self.buf, np.uint16, n, start).astype(np.uint32) << 16
                a = u.view(np.float32)
            else:
                a = None  # quantized: not needed by the reference
            # ggml dims are fastest-first; numpy shape is the reverse.
            self.tensors[name] = None if a is None else a.reshape(tuple(reversed(dims)))

    def _unpack(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def _string(self):
        (n,) = self._unpack('<Q')
        s = self.buf[self.pos:self.pos + n].decode('utf-8', 'replace')
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype in _SCALARS:
            return self._unpack(_SCALARS[vtype])[0]
        if vtype == 8:
            return self._string()
        if vtype == 9:
            etype, count = self._unpack('<IQ')
            return [self._value(etype) for _ in range(count)]
        raise ValueError('unknown GGUF value type %d' % vtype)
