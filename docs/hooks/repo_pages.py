"""MkDocs hook: Markdown files that live beside the code, published at their repository paths.

``cluster/README.md``, ``benchmarks/README.md`` and the benchmark results
(``benchmarks/results/**``) stay where their tools write and read them; this hook adds them
to the site under the same paths, so their relative links, and the links the docs pages
make to them (``benchmarks/results/orchestration.md``), resolve as they do on GitHub. No
copy is committed under ``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

#: repository-relative glob patterns of the files published
PATTERNS = ("cluster/README.md", "benchmarks/README.md", "benchmarks/results/**/*.md",
            "benchmarks/results/**/*.png")


def on_files(files: Files, config) -> Files:
    root = Path(config.config_file_path).parent
    for pattern in PATTERNS:
        found = sorted(root.glob(pattern))
        if not found:
            raise FileNotFoundError(f"docs/hooks/repo_pages.py: nothing matches {pattern}")
        for path in found:
            src_uri = path.relative_to(root).as_posix()
            if files.get_file_from_path(src_uri) is None:
                files.append(File.generated(config, src_uri, abs_src_path=str(path),
                                            inclusion=InclusionLevel.NOT_IN_NAV))
    return files
