#!/usr/bin/env python3
"""Generates src/util/unicode_tables.inc from the Unicode Character Database.

The tables behind src/util/unicode.h, so that TLR needs no ICU at run time:
  - per code point: general category (ICU's UCharCategory numbering), the binary
    properties White_Space, Alphabetic, Cased and Case_Ignorable, and whether NFC_Quick_Check
    is other than Yes (two-stage table);
  - canonical combining classes (two-stage table);
  - canonical and compatibility decomposition mappings (one level; applied recursively);
  - canonical composition pairs (Full_Composition_Exclusion left out);
  - full lower and upper case mappings (UnicodeData's simple mappings overridden by
    SpecialCasing's unconditional ones);
  - simple case folding and its inverse (case-insensitive regex matching).

Input: Debian's unicode-data package (/usr/share/unicode), the Unicode version Debian's ICU
was built with (15.0 in Debian 12). Standard library only. Usage:
  scripts/gen_unicode_tables.py [--ucd /usr/share/unicode] [-o src/util/unicode_tables.inc]
  scripts/gen_unicode_tables.py --check   (exit 1 when the checked-in file differs)
"""
import argparse
import os
import sys

CATEGORIES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Me", "Mc", "Nd", "Nl", "No", "Zs", "Zl",
              "Zp", "Cc", "Cf", "Co", "Cs", "Pd", "Ps", "Pe", "Pc", "Po", "Sm", "Sc", "Sk", "So",
              "Pi", "Pf"]
N = 0x110000
# Property bits above the 5-bit category.
WHITE_SPACE, ALPHABETIC, CASED, CASE_IGNORABLE, NFC_QC_NOT_YES = 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9


def read_ucd(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [field.strip() for field in line.split(";")]


def code_range(field):
    if ".." in field:
        a, b = field.split("..")
        return range(int(a, 16), int(b, 16) + 1)
    return range(int(field, 16), int(field, 16) + 1)


def binary_property(path, name):
    cps = set()
    for fields in read_ucd(path):
        if len(fields) >= 2 and fields[1] == name:
            cps.update(code_range(fields[0]))
    return cps


def two_stage(values, block):
    """(index, blocks, total bytes estimate) of a two-stage table over all code points."""
    blocks, index, seen = [], [], {}
    for start in range(0, N, block):
        chunk = tuple(values[start:start + block])
        if chunk not in seen:
            seen[chunk] = len(blocks)
            blocks.append(chunk)
        index.append(seen[chunk])
    return index, blocks


def best_two_stage(values, elem_bytes):
    best = None
    for shift in range(4, 11):
        block = 1 << shift
        index, blocks = two_stage(values, block)
        size = len(index) * 2 + len(blocks) * block * elem_bytes
        if best is None or size < best[0]:
            best = (size, shift, index, blocks)
    return best[1:]


def c_array(ctype, name, values, per_line=16):
    lines = [f"static const {ctype} {name}[{len(values)}] = {{"]
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(str(v) for v in values[i:i + per_line]) + ",")
    lines.append("};")
    return "\n".join(lines)


def generate(ucd):
    props = [0] * N
    ccc = [0] * N
    upper_simple, lower_simple = {}, {}
    decomp = {}  # cp -> (compat, [cps])
    first = None
    for f in read_ucd(os.path.join(ucd, "UnicodeData.txt")):
        cp, name, cat = int(f[0], 16), f[1], f[2]
        klass = int(f[3])
        if name.endswith(", First>"):
            first = cp
            continue
        cps = range(first, cp + 1) if name.endswith(", Last>") else [cp]
        first = None
        for c in cps:
            props[c] = CATEGORIES.index(cat)
            ccc[c] = klass
        if f[5]:
            parts = f[5].split()
            compat = parts[0].startswith("<")
            decomp[cp] = (compat, [int(p, 16) for p in (parts[1:] if compat else parts)])
        if f[12]:
            upper_simple[cp] = [int(f[12], 16)]
        if f[13]:
            lower_simple[cp] = [int(f[13], 16)]
    for name, bit, path in (("White_Space", WHITE_SPACE, "PropList.txt"),
                            ("Alphabetic", ALPHABETIC, "DerivedCoreProperties.txt"),
                            ("Cased", CASED, "DerivedCoreProperties.txt"),
                            ("Case_Ignorable", CASE_IGNORABLE, "DerivedCoreProperties.txt")):
        for c in binary_property(os.path.join(ucd, path), name):
            props[c] |= bit
    for fields in read_ucd(os.path.join(ucd, "DerivedNormalizationProps.txt")):
        if len(fields) >= 3 and fields[1] == "NFC_QC" and fields[2] in ("N", "M"):
            for c in code_range(fields[0]):
                props[c] |= NFC_QC_NOT_YES
    exclusions = binary_property(os.path.join(ucd, "DerivedNormalizationProps.txt"),
                                 "Full_Composition_Exclusion")

    upper, lower = dict(upper_simple), dict(lower_simple)
    for f in read_ucd(os.path.join(ucd, "SpecialCasing.txt")):
        # code; lower; title; upper; (condition_list;)
        if len(f) >= 5 and f[4]:
            continue  # conditional (Final_Sigma, locales): handled in code or not used
        cp = int(f[0], 16)
        low = [int(x, 16) for x in f[1].split()]
        up = [int(x, 16) for x in f[3].split()]
        if low != [cp]:
            lower[cp] = low
        else:
            lower.pop(cp, None)
        if up != [cp]:
            upper[cp] = up
        else:
            upper.pop(cp, None)

    fold = {}  # simple case folding (statuses C and S): what case-insensitive regexes compare
    for f in read_ucd(os.path.join(ucd, "CaseFolding.txt")):
        if f[1] in ("C", "S"):
            fold[int(f[0], 16)] = [int(f[2], 16)]

    compositions = []
    for cp, (compat, parts) in decomp.items():
        if compat or len(parts) != 2 or cp in exclusions:
            continue
        compositions.append((parts[0], parts[1], cp))
    compositions.sort()

    out = ["// Generated by scripts/gen_unicode_tables.py from the Unicode Character Database",
           "// (Debian's unicode-data package). Do not edit; regenerate. See src/util/unicode.h.",
           "// clang-format off", ""]
    version = "unknown"
    readme = os.path.join(ucd, "ReadMe.txt")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            for line in f:
                if "Version" in line and "Unicode" in line:
                    digits = [w for w in line.replace(",", " ").split() if w[:1].isdigit()]
                    if digits:
                        version = digits[0].rstrip(".")
                        break
    out.append(f'#define TLR_UNICODE_VERSION "{version}"')
    shift, index, blocks = best_two_stage(props, 2)
    out.append(f"static constexpr int kPropShift = {shift};")
    out.append(c_array("uint16_t", "kPropIndex", index))
    out.append(c_array("uint16_t", "kPropBlocks", [v for b in blocks for v in b]))
    shift, index, blocks = best_two_stage(ccc, 1)
    out.append(f"static constexpr int kCccShift = {shift};")
    out.append(c_array("uint16_t", "kCccIndex", index))
    out.append(c_array("uint8_t", "kCccBlocks", [v for b in blocks for v in b]))

    def mapping_table(name, table, flag_of=None):
        keys = sorted(table)
        pool, entries = [], []
        for cp in keys:
            value = table[cp]
            flags = flag_of(cp) if flag_of else 0
            # entry: code point (21 bits) | flags << 21; start into the pool (20 bits) | length << 20
            entries.append(cp | flags << 21)
            entries.append(len(pool) | len(value) << 20)
            pool.extend(value)
        out.append(c_array("uint32_t", f"k{name}Entries", entries))
        out.append(c_array("uint32_t", f"k{name}Pool", pool or [0]))

    mapping_table("Decomp", {cp: parts for cp, (compat, parts) in decomp.items()},
                  flag_of=lambda cp: 1 if decomp[cp][0] else 0)
    mapping_table("Lower", lower)
    mapping_table("Upper", upper)
    mapping_table("Fold", fold)
    inverse = sorted((v[0], cp) for cp, v in fold.items())
    out.append(c_array("uint32_t", "kFoldInverse", [x for pair in inverse for x in pair]))
    flat = []
    for a, b, c in compositions:
        flat.extend((a, b, c))
    out.append(c_array("uint32_t", "kCompositions", flat, per_line=12))
    return "\n".join(out) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ucd", default="/usr/share/unicode", help="Unicode Character Database folder")
    ap.add_argument("-o", "--out", default=os.path.join(here, "..", "src", "util", "unicode_tables.inc"))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.ucd, "UnicodeData.txt")):
        sys.exit(f"gen_unicode_tables: no UnicodeData.txt in {args.ucd} (apt-get install unicode-data)")
    text = generate(args.ucd)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"gen_unicode_tables: {args.out} is not what the script generates from {args.ucd}; "
                         "run scripts/gen_unicode_tables.py")
        print(f"{args.out}: up to date")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out} ({len(text) // 1024} KiB of source)")


if __name__ == "__main__":
    main()
