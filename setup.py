"""Packaging for repronet.

repronet runs under Debian's system interpreter next to Debian's packages (mininet,
python3-os-ken, python3-scapy, python3-numpy, python3-pandas, python3-seaborn), which
vagrant/provision.sh installs with apt. install_requires is therefore empty on purpose:
pip must never fetch PyPI copies over them (the PyPI os-ken has no osken-manager, and
Mininet is not on PyPI in a usable form). provision.sh makes the checkout importable for
/usr/bin/python3 with a .pth file, which is the supported install: a wheel
(`pip install --no-deps .`) carries the Python packages only, not the C link-delay daemon
that provision.sh builds in repronet/emu/linkdelay/.
"""

from setuptools import find_packages, setup

setup(
    name='repronet',
    version='0.1.0',
    description='Reproducible performance experiments on distributed systems, on Mininet',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    python_requires='>=3.9',
    packages=find_packages(include=['repronet', 'repronet.*', 'topologies', 'topologies.*',
                                    'nodes', 'nodes.*',
                                    'workloads', 'workloads.*', 'analysis', 'analysis.*']),
    install_requires=[],
    classifiers=[
        'Programming Language :: Python :: 3',
        'Operating System :: POSIX :: Linux',
        'Topic :: System :: Networking',
        'Intended Audience :: Science/Research',
    ],
)
