"""The Compute Engine machine types Vertex AI custom training offers.

A misspelt machine type (`n1-standard-5`, `n9-superduper-1024`) would
otherwise be accepted here and refused by Vertex AI only at job creation, or
worse, after the other pools were provisioned. The table lists the families
and sizes of Vertex AI's "Configure compute resources for custom training"
page (CPU families; GPU families with their `-<N>g` sizes). A family Vertex
AI adds later needs a line here.
"""
import difflib

# family -> sizes (the part after the family's last dash).
FAMILIES = {
    'e2-standard': (4, 8, 16, 32),
    'e2-highmem': (2, 4, 8, 16),
    'e2-highcpu': (16, 32),
    'n1-standard': (4, 8, 16, 32, 64, 96),
    'n1-highmem': (2, 4, 8, 16, 32, 64, 96),
    'n1-highcpu': (16, 32, 64, 96),
    'n2-standard': (4, 8, 16, 32, 48, 64, 80),
    'n2-highmem': (2, 4, 8, 16, 32, 48, 64, 80),
    'n2-highcpu': (16, 32, 48, 64, 80),
    'n2d-standard': (4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    'n2d-highmem': (2, 4, 8, 16, 32, 48, 64, 80, 96),
    'n2d-highcpu': (16, 32, 48, 64, 80, 96, 128, 224),
    'c2-standard': (4, 8, 16, 30, 60),
    'c2d-standard': (2, 4, 8, 16, 32, 56, 112),
    'c2d-highmem': (2, 4, 8, 16, 32, 56, 112),
    'c2d-highcpu': (2, 4, 8, 16, 32, 56, 112),
    'c3-standard': (4, 8, 22, 44, 88, 176),
    'c3-highmem': (4, 8, 22, 44, 88, 176),
    'c3-highcpu': (4, 8, 22, 44, 88, 176),
    'm1-ultramem': (40, 80, 160),
    'm1-megamem': (96,),
    'g2-standard': (4, 8, 12, 16, 24, 32, 48, 96),
    'a2-highgpu': ('1g', '2g', '4g', '8g'),
    'a2-megagpu': ('16g',),
    'a2-ultragpu': ('1g', '2g', '4g', '8g'),
    'a3-highgpu': ('1g', '2g', '4g', '8g'),
    'a3-megagpu': ('8g',),
    'a3-ultragpu': ('8g',),
}
# Longer names are not compared (difflib's time grows with the length squared).
_MAX_NAME_CHARS = 40
MACHINE_TYPES = tuple(sorted('%s-%s' % (family, size)
                             for family, sizes in FAMILIES.items() for size in sizes))


def unknown_reason(machine_type, other_names=()):
    """Why `machine_type` is not a Vertex AI training machine, or None if it is.

    The reason names the closest known type (`difflib`), among the table and
    `other_names` (e.g. the legacy AI Platform names).
    """
    if machine_type in MACHINE_TYPES:
        return None
    if len(machine_type) > _MAX_NAME_CHARS:  # no closest name worth comparing
        return 'unknown machine type %r...: longer than any machine type' % (
            machine_type[:_MAX_NAME_CHARS])
    family, _, _ = machine_type.rpartition('-')
    if family in FAMILIES:
        return ('unknown machine type %r: Vertex AI offers %s in sizes %s'
                % (machine_type, family, ', '.join(str(s) for s in FAMILIES[family])))
    candidates = MACHINE_TYPES + tuple(other_names)
    closest = difflib.get_close_matches(machine_type, candidates, n=1, cutoff=0.0)
    return ('unknown machine type %r (closest: %s; Vertex AI offers the families '
            '%s, or a legacy AI Platform name)'
            % (machine_type, closest[0], ', '.join(sorted(FAMILIES))))
