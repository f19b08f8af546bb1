"""Vertex AI custom-training prices: a dated table, and its refresh from Google's list.

Vertex AI bills custom training at its own rates (not Compute Engine's): per
machine (per vCPU-hour and GiB-hour of its family), per GPU, on-demand or
Spot. The table in use is, in this order:

1. the user's cache `~/.cache/estimator-trainers/vertex-ai-prices.csv`
   (`$XDG_CACHE_HOME` respected), written by `refresh` from the Cloud Billing
   Catalog API (`services.skus.list` of the Vertex AI service, USD list
   prices), when it exists and reads;
2. else the table shipped in the package (`prices.csv`), whose every row names
   its source and the date it was read, and says `listed` (a price read from
   Google's own list) or `derived` (computed; the source says how and what of
   it is unverified).

A price older than `MAX_AGE_DAYS` is used with a warning. A machine is priced
by its own row, else by its family's per-vCPU and per-GiB rates and its shape
(`machines.shape`); what has no row is unknown, never guessed.

The Billing Catalog names training SKUs in prose ("... N1 Predefined
Instance Core running in Americas"); `sku_rates` takes only the SKUs it can
read without guessing (one machine family or one GPU, core, RAM or GPU, a unit
of hours or GiB-hours, one price tier, named regions) and says which it
skipped and why.
"""
import csv
import dataclasses
import datetime
import io
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Literal, Mapping, Optional, Tuple

from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import machines

Kind = Literal['machine', 'core', 'ram', 'gpu']
Pricing = Literal['on-demand', 'spot']
Status = Literal['listed', 'derived']
KINDS: Tuple[Kind, ...] = ('machine', 'core', 'ram', 'gpu')
PRICINGS: Tuple[Pricing, ...] = ('on-demand', 'spot')
STATUSES: Tuple[Status, ...] = ('listed', 'derived')
COLUMNS = ('region', 'kind', 'name', 'pricing', 'usd_per_hour', 'read_on', 'status', 'source')
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'prices.csv')
CACHE_FILE = 'vertex-ai-prices.csv'
MAX_AGE_DAYS = 90
# The Billing Catalog's display name of the service; its id is widely used as
# `KNOWN_SERVICE_ID`, which `refresh` confirms from the service list.
SERVICE_NAME = 'Vertex AI'
KNOWN_SERVICE_ID = 'C7E2-9256-1C43'
# A table of a few thousand rates is far below this.
LIMITS = user_files.Limits(bytes=8 << 20, expected='a price table holds a few thousand rows')


@dataclasses.dataclass(frozen=True)
class Rate:
    """One price: USD per machine-hour, per vCPU-hour (`core`), per GiB-hour
    (`ram`) or per GPU-hour, in a region, on-demand or Spot."""
    region: str
    kind: Kind
    name: str
    pricing: Pricing
    usd_per_hour: float
    read_on: datetime.date
    status: Status
    source: str

    def row(self) -> List[str]:
        return [self.region, self.kind, self.name, self.pricing, '%.10g' % self.usd_per_hour,
                self.read_on.isoformat(), self.status, self.source]


@dataclasses.dataclass(frozen=True)
class Quote:
    """A price per hour and the rates it was made of."""
    usd_per_hour: float
    rates: Tuple[Rate, ...]

    @property
    def read_on(self) -> datetime.date:
        """The date of its oldest rate."""
        return min(rate.read_on for rate in self.rates)

    @property
    def derived(self) -> bool:
        return any(rate.status == 'derived' for rate in self.rates)


@dataclasses.dataclass(frozen=True)
class PriceTable:
    """The rates in use and where they came from (`load`)."""
    rates: Tuple[Rate, ...]
    path: str
    from_cache: bool = False

    def _find(self, region: str, kind: Kind, name: str, pricing: Pricing) -> Optional[Rate]:
        for rate in self.rates:
            if (rate.region, rate.kind, rate.name, rate.pricing) == (region, kind, name,
                                                                     pricing):
                return rate
        return None

    def machine(self, region: str, machine_type: str, spot: bool = False) -> Optional[Quote]:
        """One machine's price per hour, without GPUs; None when the table lacks it."""
        pricing: Pricing = 'spot' if spot else 'on-demand'
        own = self._find(region, 'machine', machine_type, pricing)
        if own:
            return Quote(own.usd_per_hour, (own,))
        family = machine_type.split('-', 1)[0]
        core = self._find(region, 'core', family, pricing)
        ram = self._find(region, 'ram', family, pricing)
        if not (core and ram) or machine_type not in machines.MACHINE_TYPES:
            return None
        vcpus, gib = machines.shape(machine_type)
        return Quote(vcpus * core.usd_per_hour + gib * ram.usd_per_hour, (core, ram))

    def accelerator(self, region: str, gpu: str, spot: bool = False) -> Optional[Quote]:
        """One GPU's price per hour; None when the table lacks it."""
        rate = self._find(region, 'gpu', gpu, 'spot' if spot else 'on-demand')
        return Quote(rate.usd_per_hour, (rate,)) if rate else None

    @property
    def read_on(self) -> datetime.date:
        return min(rate.read_on for rate in self.rates)

    def describe(self) -> str:
        """Where the table is from, for the lines that use it."""
        return '%s (%s, read %s to %s)' % (
            self.path, 'refreshed from the Cloud Billing Catalog' if self.from_cache
            else 'shipped', self.read_on.isoformat(),
            max(rate.read_on for rate in self.rates).isoformat())


def stale_warning(read_on: datetime.date, today: datetime.date, what: str) -> Optional[str]:
    """A warning when prices read on `read_on` are older than `MAX_AGE_DAYS`."""
    age = (today - read_on).days
    if age <= MAX_AGE_DAYS:
        return None
    return ('%s were read on %s, %d days ago (more than %d): list prices may have changed; '
            '`python -m estimator_trainers.tools.cloud prices refresh` reads the current ones'
            % (what, read_on.isoformat(), age, MAX_AGE_DAYS))


def cache_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """Where `refresh` writes (`$XDG_CACHE_HOME`, else `~/.cache`)."""
    environ = os.environ if environ is None else environ
    base = environ.get('XDG_CACHE_HOME') or os.path.join(
        environ.get('HOME') or os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'estimator-trainers', CACHE_FILE)


def _date(text: str) -> datetime.date:
    """`YYYY-MM-DD`, or `YYYY-MM` (a month: its first day, the older reading)."""
    if re.fullmatch(r'\d{4}-\d{2}', text):
        text += '-01'
    return datetime.date.fromisoformat(text)


def parse_table(text: str, source: str) -> Tuple[Rate, ...]:
    """The rates of a price table's CSV text.

    Raises:
      UserInputError: naming `source`, the line and what was expected.
    """
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise UserInputError('%s: expected a price table whose first line is %s'
                             % (source, ','.join(COLUMNS)), path=source)
    rates = []
    for line, row in enumerate(reader, start=2):
        try:
            if len(row) != len(COLUMNS):
                raise ValueError('%d fields, expected %d' % (len(row), len(COLUMNS)))
            region, kind, name, pricing, usd, read_on, status, origin = row
            if kind not in KINDS or pricing not in PRICINGS or status not in STATUSES:
                raise ValueError('kind, pricing or status is not one of %s, %s, %s'
                                 % ('|'.join(KINDS), '|'.join(PRICINGS), '|'.join(STATUSES)))
            price = float(usd)
            if not 0 <= price < 1e6:
                raise ValueError('usd_per_hour %r is not a price' % usd)
            rates.append(Rate(region, kind, name, pricing, price, _date(read_on), status,
                              origin))
        except ValueError as e:
            raise UserInputError('%s line %d: %s' % (source, line, e), path=source) from None
    if not rates:
        raise UserInputError('%s: the price table has no rows' % source, path=source)
    return tuple(rates)


def read_table(path: str) -> PriceTable:
    text = user_files.read_text(path, 'price table %s' % path, LIMITS)
    return PriceTable(parse_table(text or '', path), path)


def load(environ: Optional[Mapping[str, str]] = None,
         warn: Optional[Callable[[str], object]] = None) -> PriceTable:
    """The refreshed table in the user's cache, else the shipped one.

    A cache that cannot be read is said (`warn`) and the shipped table used.
    """
    cached = cache_path(environ)
    if os.path.exists(cached):
        try:
            return dataclasses.replace(read_table(cached), from_cache=True)
        except UserInputError as e:
            if warn:
                warn('%s; using the shipped price table' % e)
    return read_table(SHIPPED)


def write_table(path: str, rates: Iterable[Rate]) -> None:
    """Writes `rates` as a price table, atomically."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow(COLUMNS)
    for rate in sorted(rates, key=lambda r: (r.region, r.kind, r.name, r.pricing)):
        writer.writerow(rate.row())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    safe_io.write_atomic(path, out.getvalue())


# ------------------------------------------------------------- the Billing Catalog

# Machine families as the SKU descriptions name them.
_FAMILY_RE = re.compile(r'\b(N1|N2D|N2|E2|C2D|C2|C3|A2|A3|G2|M1)\b')
# GPU names in SKU descriptions -> Vertex AI's; longer names first.
_GPUS = (('A100 80GB', 'NVIDIA_A100_80GB'), ('H100 80GB Mega', 'NVIDIA_H100_MEGA_80GB'),
         ('H100 Mega', 'NVIDIA_H100_MEGA_80GB'), ('H100', 'NVIDIA_H100_80GB'),
         ('H200', 'NVIDIA_H200_141GB'), ('A100', 'NVIDIA_TESLA_A100'),
         ('V100', 'NVIDIA_TESLA_V100'), ('P100', 'NVIDIA_TESLA_P100'),
         ('T4', 'NVIDIA_TESLA_T4'), ('P4', 'NVIDIA_TESLA_P4'), ('L4', 'NVIDIA_L4'),
         ('K80', 'NVIDIA_TESLA_K80'))
_UNITS = {'core': 'h', 'gpu': 'h', 'ram': 'GiBy.h'}
_USAGE_TYPES: Dict[str, Pricing] = {'OnDemand': 'on-demand', 'Preemptible': 'spot'}


def _kind_and_name(description: str) -> Tuple[Optional[Kind], Optional[str], str]:
    """(kind, family or GPU, why not) of a training SKU's description."""
    words = description.lower()
    if 'gpu' in words:
        found = [vertex for name, vertex in _GPUS
                 if re.search(r'\b%s\b' % re.escape(name.lower()), words)]
        if len(set(found)) != 1:
            return None, None, 'names %s GPU' % ('no known' if not found else 'more than one')
        return 'gpu', found[0], ''
    families = set(_FAMILY_RE.findall(description))
    if len(families) != 1:
        return None, None, 'names %s machine family' % ('no' if not families else
                                                         'more than one')
    family = families.pop().lower()
    if re.search(r'\bcore\b', words):
        return 'core', family, ''
    if re.search(r'\b(ram|memory)\b', words):
        return 'ram', family, ''
    return None, None, 'is neither a core, a RAM nor a GPU price'


def _price(pricing_info: List[Mapping[str, Any]]) -> Tuple[Optional[float], str, str]:
    """(USD per usage unit, the unit, why not) of a SKU's current pricing."""
    if not pricing_info:
        return None, '', 'has no pricingInfo'
    expression = pricing_info[-1].get('pricingExpression') or {}
    tiers = expression.get('tieredRates') or []
    if len(tiers) != 1:
        return None, '', 'has %d price tiers' % len(tiers)
    money = tiers[0].get('unitPrice') or {}
    if money.get('currencyCode', 'USD') != 'USD':
        return None, '', 'is priced in %s' % money.get('currencyCode')
    usd = int(money.get('units') or 0) + int(money.get('nanos') or 0) / 1e9
    return usd, str(expression.get('usageUnit', '')), ''


@dataclasses.dataclass(frozen=True)
class Refreshed:
    """What a refresh read: the rates, and the training SKUs it skipped (with why)."""
    rates: Tuple[Rate, ...]
    skipped: Tuple[str, ...]
    service: str


def sku_rates(skus: Iterable[Mapping[str, Any]], service: str,
              today: datetime.date) -> Refreshed:
    """The training rates among Vertex AI's SKUs (`services.skus.list` items)."""
    found: Dict[Tuple[str, str, str, str], Rate] = {}
    clashing = set()
    skipped = []
    for sku in skus:
        description = str(sku.get('description', ''))
        if not re.search(r'\btrain', description, re.IGNORECASE):
            continue  # prediction, pipelines, notebooks, generative AI...
        what = '%s (%s)' % (description, sku.get('skuId', '?'))
        usage = (sku.get('category') or {}).get('usageType')
        if usage not in _USAGE_TYPES:
            continue  # commitments
        kind, name, why = _kind_and_name(description)
        usd, unit, why_price = _price(sku.get('pricingInfo') or [])
        regions = [r for r in sku.get('serviceRegions') or [] if r != 'global']
        if kind is None or name is None:
            skipped.append('%s: %s' % (what, why))
        elif usd is None:
            skipped.append('%s: %s' % (what, why_price))
        elif unit != _UNITS[kind]:
            skipped.append('%s: unit %r, expected %r' % (what, unit, _UNITS[kind]))
        elif not regions:
            skipped.append('%s: names no region' % what)
        else:
            effective = (sku.get('pricingInfo') or [{}])[-1].get('effectiveTime', '?')
            for region in regions:
                key = (region, kind, name, _USAGE_TYPES[usage])
                rate = Rate(region, kind, name, _USAGE_TYPES[usage], usd, today, 'listed',
                            'Cloud Billing Catalog services/%s/skus/%s: %s (effective %s)'
                            % (service, sku.get('skuId', '?'), description, effective))
                if key in found and found[key].usd_per_hour != usd:
                    clashing.add(key)
                found.setdefault(key, rate)
    for key in sorted(clashing):
        skipped.append('%s %s %s %s: two SKUs give different prices; neither is used'
                       % key)
        del found[key]
    return Refreshed(tuple(found.values()), tuple(skipped), service)


def find_service(billing: Any, extra: Mapping[str, str]) -> str:
    """The Billing Catalog id of the Vertex AI service (from `services.list`;
    `extra`: the API key parameter, if any).

    Raises:
      UserInputError: no service of that display name.
    """
    from estimator_trainers.tools.cloud import api  # pylint: disable=import-outside-toplevel
    services = billing.services()
    request = services.list(pageSize=5000, **extra)
    names = []
    while request is not None:
        response = api.execute(request, 'services.list', 'cloudbilling', None)
        for service in response.get('services', []):
            if service.get('displayName') == SERVICE_NAME:
                return str(service['serviceId'])
            names.append(service.get('displayName', ''))
        request = services.list_next(request, response)
    raise UserInputError('the Cloud Billing Catalog lists no %r service (%d services read)'
                         % (SERVICE_NAME, len(names)))


def refresh(billing: Any, today: datetime.date, api_key: Optional[str] = None,
            progress: Optional[Callable[[str], None]] = None) -> Refreshed:
    """Reads Vertex AI's training rates through a `cloudbilling v1` service.

    Args:
      billing: the googleapiclient service (`api.build('cloudbilling', 'v1', http)`).
      api_key: an API key, sent as the `key` parameter (else the transport's
        credentials authorize the calls).
    """
    from estimator_trainers.tools.cloud import api  # pylint: disable=import-outside-toplevel
    extra = {'key': api_key} if api_key else {}
    service = find_service(billing, extra)
    skus = billing.services().skus()
    request = skus.list(parent='services/%s' % service, currencyCode='USD', pageSize=5000,
                        **extra)
    found: List[Mapping[str, Any]] = []
    while request is not None:
        response = api.execute(request, 'services.skus.list of services/%s' % service,
                               'cloudbilling', None)
        found.extend(response.get('skus', []))
        if progress:
            progress('read %d SKUs of services/%s' % (len(found), service))
        request = skus.list_next(request, response)
    return sku_rates(found, service, today)
