#!/usr/bin/env python3
"""Fails when this machine has target-architecture software that scripts/install_deps.sh did not
install, so a green CI run cannot rest on something a fresh machine lacks.

The aarch64 cross build must see only what the project installs: Debian's cross toolchain
(g++-aarch64-linux-gnu and the *-arm64-cross packages it depends on) and the GoogleTest sources.
A hand-made multiarch setup (`dpkg --add-architecture arm64` and some `libfoo-dev:arm64`), a
*-cross package installed by hand, or files copied into the cross prefix can make the build pass
here and fail on a fresh machine. Checked, in this order:
  1. no foreign dpkg architecture is configured, and no package of another architecture is installed;
  2. every installed cross package (name ending in -<arch>-cross, or owning files in a cross
     prefix) is install_deps.sh's or one of their dependencies;
  3. every file in the cross prefixes belongs to such a package (nothing copied in by hand).
Run after scripts/install_deps.sh (.ci/run does). Exit status 1 with the reasons on stderr.
Usage: scripts/check_clean_machine.py   (Python 3 standard library, Debian's dpkg)
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the aarch64 cross compiler and a multiarch arm64 install put headers and libraries.
CROSS_PREFIXES = ("/usr/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu",
                  "/usr/include/aarch64-linux-gnu", "/usr/lib/gcc-cross/aarch64-linux-gnu")
CROSS_PACKAGE = re.compile(r"-(arm64|armhf|armel|i386|riscv64|ppc64el|s390x)-cross$")


def run(*command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def project_packages():
    """The Debian packages scripts/install_deps.sh installs (it prints them with --list)."""
    return run(os.path.join(ROOT, "scripts", "install_deps.sh"), "--list").split()


def installed_packages():
    """name -> (architecture, [dependency names]); virtual names map through Provides."""
    fields = "${Package}\t${Architecture}\t${Status}\t${Depends}, ${Pre-Depends}\t${Provides}\n"
    packages, providers = {}, {}
    for line in run("dpkg-query", "-W", "-f=" + fields).splitlines():
        name, arch, status, depends, provides = line.split("\t")
        if not status.endswith(" installed"):
            continue
        # "a (>= 1) | b:any, c" -> a, b, c: every alternative counts, whichever is installed.
        names = [re.split(r"[\s(:]", alt.strip())[0]
                 for group in depends.split(",") for alt in group.split("|")]
        packages[name] = (arch, [n for n in names if n])
        for virtual in provides.split(","):
            virtual = re.split(r"[\s(]", virtual.strip())[0]
            if virtual:
                providers.setdefault(virtual, []).append(name)
    return packages, providers


def closure(roots, packages, providers):
    """Installed packages reachable from roots through dependencies."""
    seen, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        for real in [name] + providers.get(name, []):
            if real in packages and real not in seen:
                seen.add(real)
                stack.extend(packages[real][1])
    return seen


def owners():
    """path -> package, from dpkg's file lists (merged /usr: /lib/x is also /usr/lib/x)."""
    result = {}
    for listing in glob.glob("/var/lib/dpkg/info/*.list"):
        package = os.path.basename(listing)[:-len(".list")].split(":")[0]
        with open(listing, encoding="utf-8", errors="replace") as f:
            for path in f:
                path = path.rstrip("\n")
                result[path] = package
                if path.startswith("/lib/"):
                    result["/usr" + path] = package
    return result


def files_under(prefixes):
    # Merged /usr: /lib/x is /usr/lib/x; walk each real directory once, by its /usr name.
    for prefix in sorted({os.path.realpath(p) for p in prefixes}):
        for root, dirs, files in os.walk(prefix):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                path = os.path.join(root, name)
                # update-alternatives links are the alternatives system's, not a package's
                if os.path.islink(path) and os.readlink(path).startswith("/etc/alternatives/"):
                    continue
                yield path


def main():
    problems = []
    foreign = run("dpkg", "--print-foreign-architectures").split()
    if foreign:
        problems.append(
            "foreign dpkg architecture(s) configured: " + ", ".join(foreign) + ". The project's "
            "scripts never add one (the cross build uses Debian's *-cross packages); purge their "
            "packages and run `dpkg --remove-architecture " + foreign[0] + "`.")

    native = run("dpkg", "--print-architecture").strip()
    packages, providers = installed_packages()
    alien = sorted(f"{n}:{a}" for n, (a, _) in packages.items() if a not in (native, "all"))
    if alien:
        problems.append("packages of another architecture are installed: " + " ".join(alien))

    allowed = closure(project_packages(), packages, providers)
    path_owner = owners()
    cross_files = list(files_under(CROSS_PREFIXES))
    cross_packages = {n for n in packages if CROSS_PACKAGE.search(n)}
    cross_packages |= {path_owner[p] for p in cross_files if p in path_owner}
    extra = sorted(cross_packages - allowed)
    if extra:
        problems.append("cross/target packages that scripts/install_deps.sh does not install "
                        "(installed by hand?): " + " ".join(extra) + ". Remove them, or add "
                        "them to install_deps.sh if the build needs them.")

    unowned = [p for p in cross_files if p not in path_owner]
    if unowned:
        shown = "\n    ".join(unowned[:20]) + ("\n    ..." if len(unowned) > 20 else "")
        problems.append(f"{len(unowned)} file(s) in the cross prefixes belong to no package "
                        f"(copied or `make install`ed by hand):\n    {shown}")

    if problems:
        print("check_clean_machine: this machine has target-architecture software the project's "
              "scripts did not install, so a passing build here may fail on a fresh machine:",
              file=sys.stderr)
        for problem in problems:
            print("  - " + problem, file=sys.stderr)
        return 1
    print(f"check_clean_machine: ok ({len(cross_packages)} cross packages, all from "
          f"install_deps.sh; {len(cross_files)} files in the cross prefixes, all theirs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
