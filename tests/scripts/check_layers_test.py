#!/usr/bin/python3
"""scripts/check_layers.py on small trees of its own: it passes a tree whose includes point down and
names each include that points up, sideways or at a folder outside the picture, and each external
header outside the folders allowed it; inside a folder that orders its own files, each include
that points up or sideways, each file missing from that picture and each name in it with no file;
and it passes this repository."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")

ARCHITECTURE = """# Architecture

```layers
adapters/cli
adapters/runtime | adapters/log
core
```

```external-includes
sqlite3.h: adapters/log
```

```layers core
json | error
base
```
"""


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    return p.returncode, p.stdout


class check_layers(unittest.TestCase):
    def tree(self, files):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        files = {"docs/architecture.md": ARCHITECTURE, "core/json.hpp": '#pragma once\n#include "core/base.hpp"\n',
                 "core/error.hpp": '#pragma once\n#include "core/base.hpp"\n', "core/base.hpp": "#pragma once\n",
                 "adapters/log/log.hpp": '#pragma once\n#include <sqlite3.h>\n#include "core/json.hpp"\n',
                 "adapters/runtime/turn.cpp": '#include "core/json.hpp"\n',
                 "adapters/cli/main.cpp": '#include "adapters/runtime/turn.hpp"\n#include "adapters/log/log.hpp"\n',
                 "adapters/runtime/turn.hpp": "#pragma once\n", **files}
        for name, text in files.items():
            path = os.path.join(d.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return d.name

    def test_includes_that_point_down_pass(self):
        self.assertEqual(run(self.tree({})), (0, ""))

    def test_an_include_above_is_named_with_its_line(self):
        code, out = run(self.tree({"core/json.cpp": '#include "core/json.hpp"\n\n#include "adapters/cli/cli.hpp"\n',
                                   "adapters/cli/cli.hpp": "#pragma once\n"}))
        self.assertEqual(code, 1)
        self.assertIn("core/json.cpp:3: includes adapters/cli/cli.hpp: adapters/cli/ is above core/", out)

    def test_an_include_beside_is_named(self):
        code, out = run(self.tree({"adapters/log/log.cpp": '#include "adapters/runtime/turn.hpp"\n'}))
        self.assertEqual(code, 1)
        self.assertIn("adapters/log/log.cpp:1: includes adapters/runtime/turn.hpp: adapters/runtime/ is beside adapters/log/", out)

    def test_a_folder_outside_the_picture_is_named(self):
        code, out = run(self.tree({"adapters/extra/x.cpp": '#include "core/json.hpp"\n'}))
        self.assertEqual(code, 1)
        self.assertIn("adapters/extra/x.cpp: its folder adapters/extra/ is not in docs/architecture.md's layers", out)

    def test_an_external_header_outside_its_folders_is_named(self):
        code, out = run(self.tree({"adapters/runtime/turn.cpp": "#include <sqlite3.h>\n"}))
        self.assertEqual(code, 1)
        self.assertIn("adapters/runtime/turn.cpp:1: <sqlite3.h> is included only in adapters/log", out)

    def refused(self, files):
        """What check_layers prints of a tree it must fail."""
        code, out = run(self.tree(files))
        self.assertEqual(code, 1, out)
        return out

    def test_an_include_above_inside_a_folder_is_named(self):
        out = self.refused({"core/base.cpp": '#include "core/base.hpp"\n#include "core/json.hpp"\n#include "error.hpp"\n'})
        self.assertIn("core/base.cpp:2: includes core/json.hpp: json is above base in core/", out)
        self.assertIn("core/base.cpp:3: includes core/error.hpp: error is above base in core/", out)

    def test_an_include_beside_inside_a_folder_is_named(self):
        self.assertIn("core/error.cpp:2: includes core/json.hpp: json is beside error in core/",
                      self.refused({"core/error.cpp": '#include "core/error.hpp"\n#include "core/json.hpp"\n'}))

    def test_a_file_missing_from_its_folders_picture_is_named(self):
        self.assertIn("core/extra.hpp: extra is not in docs/architecture.md's layers of core/",
                      self.refused({"core/extra.hpp": '#pragma once\n#include "core/base.hpp"\n'}))

    def test_a_name_without_a_file_in_a_folders_picture_is_named(self):
        self.assertIn("docs/architecture.md's layers of core/ name gone, which has no source file there",
                      self.refused({"docs/architecture.md": ARCHITECTURE.replace("json | error\n", "json | error | gone\n")}))

    def test_this_repository_passes(self):
        code, out = run(ROOT)
        self.assertEqual((code, out), (0, ""))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
