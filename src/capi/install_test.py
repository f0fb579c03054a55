"""The embeddable library as a user gets it (capi layer, run by ctest): install the build into a
temporary prefix; build examples/generate.c with nothing but `pkg-config --cflags --libs tlr`
and again through a CMake project with find_package(tlr); run both and the Python example on
the bundled demo pair, in process and against a real `tlr serve` on a loopback port; their
tokens and sources must equal `tlr generate --trace`'s. Standard library only.

    install_test.py BUILD_DIR SOURCE_DIR [--cflags FLAGS] [--preload LIB]

--cflags: extra compiler flags for the examples (the asan build passes -fsanitize=...);
--preload: a library the Python example needs preloaded (the ASan runtime).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None
QUESTIONS = [  # test split questions 1 and 2 in the form the demo models were trained on
    "Question: What would you use a tharko for?\nA. building\nB. singing\nC. cooking\nD. fishing\nE. healing\n",
    "Question: Where does a fexko live?\nA. marsh\nB. desert\nC. forest\nD. river\nE. cave\n",
]
MAX_TOKENS = "40"


def run(cmd, env=None, cwd=None, check=True):
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(map(str, cmd)), p.returncode, p.stdout[-3000:],
                                                         p.stderr[-3000:]))
    return p


def parse_example(out):
    """(id, source) per line of an example's output."""
    toks = []
    for line in out.splitlines():
        fields = line.split("\t")
        toks.append((int(fields[0]), fields[1]))
    return toks


class InstalledLibraryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tlr_install_")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        run(["cmake", "--install", ARGS.build, "--prefix", cls.prefix])
        cls.tlr = os.path.join(cls.prefix, "bin", "tlr")
        cls.demo = os.path.join(cls.prefix, "share", "tlr", "models", "demo")
        cls.examples = os.path.join(cls.prefix, "share", "tlr", "examples")
        libdirs = [d for d in ("lib", "lib64") if os.path.exists(os.path.join(cls.prefix, d, "pkgconfig", "tlr.pc"))]
        libdirs += [os.path.join("lib", d) for d in os.listdir(os.path.join(cls.prefix, "lib"))
                    if os.path.exists(os.path.join(cls.prefix, "lib", d, "pkgconfig", "tlr.pc"))]
        assert libdirs, "no tlr.pc installed"
        cls.libdir = os.path.join(cls.prefix, libdirs[0])
        cls.env = dict(os.environ)
        cls.env.pop("LD_LIBRARY_PATH", None)  # everything must find the installed library by itself
        cls.env["PKG_CONFIG_PATH"] = os.path.join(cls.libdir, "pkgconfig")
        cls.env.pop("TLR_LIBRARY", None)
        cls.env.pop("TLR_DEMO_DIR", None)
        # A real server with the demo LLM on a free loopback port.
        cls.log = open(os.path.join(cls.tmp, "serve.log"), "w+")
        cls.server = subprocess.Popen([cls.tlr, "serve", "-m", os.path.join(cls.demo, "llm.gguf"), "--port", "0",
                                       "-t", "1"], stdout=cls.log, stderr=subprocess.STDOUT, env=cls.env)
        cls.url = None
        for _ in range(600):
            cls.log.seek(0)
            m = re.search(r"^listening on (\S+)", cls.log.read(), re.M)
            if m:
                cls.url = m.group(1)
                break
            if cls.server.poll() is not None:
                break
            time.sleep(0.05)
        if not cls.url:
            cls.log.seek(0)
            raise AssertionError("tlr serve did not start:\n" + cls.log.read())
        cls.reference = {}

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(30)
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def demo_file(self, name):
        return os.path.join(self.demo, name)

    def targets(self):
        return [("in process", self.demo_file("llm.gguf")), ("server", self.url)]

    def expected(self, question, target):
        """(id, source) per token of `tlr generate --trace` (the installed binary)."""
        key = (question, target)
        if key not in self.reference:
            trace = os.path.join(self.tmp, "trace.jsonl")
            llm = ["--server", target] if target.startswith("http") else ["--llm", target]
            run([self.tlr, "generate", "--slm", self.demo_file("slm.gguf"), "--router", self.demo_file("router.gguf")]
                + llm + ["-p", QUESTIONS[question], "-n", MAX_TOKENS, "-t", "1", "--no-color", "-q", "--trace", trace],
                env=self.env)
            with open(trace) as f:
                self.reference[key] = [(r["id"], r["source"]) for r in map(json.loads, f)]
            self.assertTrue(self.reference[key])
        return self.reference[key]

    def check_example(self, cmd, env=None):
        """Runs an example on every question and LLM target; compares with tlr generate."""
        routed = 0
        for q in range(len(QUESTIONS)):
            for name, target in self.targets():
                with self.subTest(question=q, llm=name):
                    out = run(cmd + [self.demo_file("slm.gguf"), self.demo_file("router.gguf"), target, QUESTIONS[q],
                                     MAX_TOKENS], env=env or self.env).stdout
                    got = parse_example(out)
                    self.assertEqual(got, self.expected(q, target))
                    routed += sum(s == "LLM" for _, s in got)
        self.assertGreater(routed, 0)  # the pair really routed tokens

    def test_installed_files(self):
        for rel in ("bin/tlr", "include/tlr.h", "share/tlr/models/demo/slm.gguf", "share/tlr/python/tlr/__init__.py",
                    "share/tlr/examples/generate.c"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, rel)), rel)
        for rel in ("libtlr.so", "libtlr.so.1", "libtlr.a", "pkgconfig/tlr.pc", "cmake/tlr/tlrConfig.cmake"):
            self.assertTrue(os.path.exists(os.path.join(self.libdir, rel)), rel)
        # The installed tlr finds the demo pair beside itself (share/tlr/models/demo) with no flags.
        help_text = run([self.tlr, "generate", "--help"], env=self.env).stdout
        self.assertIn(self.demo_file("slm.gguf"), help_text)
        out = run([self.tlr, "generate", "-p", QUESTIONS[0], "-n", "5", "-q", "--no-color", "--mode", "small_only"],
                  env=self.env, cwd=self.tmp)
        self.assertTrue(out.stdout.strip())

    def test_c_example_with_pkg_config(self):
        flags = shlex.split(run(["pkg-config", "--cflags", "--libs", "tlr"], env=self.env).stdout)
        exe = os.path.join(self.tmp, "generate-pc")
        cc = os.environ.get("CC", "cc")
        run([cc, "-std=c99", "-Wall", "-Werror", os.path.join(self.examples, "generate.c"), "-o", exe] + flags
            + shlex.split(ARGS.cflags), env=self.env)
        self.check_example([exe])  # runs with no LD_LIBRARY_PATH: tlr.pc's rpath finds libtlr.so.1

    def test_c_example_linked_statically(self):
        # libtlr.a with what `pkg-config --static` adds: the program carries TLR itself.
        flags = shlex.split(run(["pkg-config", "--cflags", "--static", "--libs", "tlr"], env=self.env).stdout)
        flags = [os.path.join(self.libdir, "libtlr.a") if f == "-ltlr" else f for f in flags]
        exe = os.path.join(self.tmp, "generate-static")
        cc = os.environ.get("CC", "cc")
        run([cc, "-std=c99", "-Wall", "-Werror", os.path.join(self.examples, "generate.c"), "-o", exe] + flags
            + shlex.split(ARGS.cflags), env=self.env)
        self.assertNotIn("libtlr", run(["readelf", "-d", exe], env=self.env).stdout)
        self.check_example([exe])

    def test_c_example_with_find_package(self):
        build = os.path.join(self.tmp, "build-example")
        run(["cmake", "-S", self.examples, "-B", build, "-DCMAKE_PREFIX_PATH=" + self.prefix,
             "-DCMAKE_C_FLAGS=" + ARGS.cflags], env=self.env)
        run(["cmake", "--build", build], env=self.env)
        self.check_example([os.path.join(build, "generate")])  # CMake's build RPATH finds the installed library

    def test_python_example(self):
        env = dict(self.env)  # the installed package finds libtlr.so.1 relative to itself
        if ARGS.preload:
            env["LD_PRELOAD"] = ARGS.preload
            env["ASAN_OPTIONS"] = "detect_leaks=0"
        self.check_example([sys.executable, os.path.join(self.examples, "generate.py")], env=env)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("source")
    parser.add_argument("--cflags", default="")
    parser.add_argument("--preload", default="")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
