import {
  ratioOf,
  type PairedRatios,
  type RlqsChange,
  type RlqsResults,
  type RlqsSideSummary,
} from './rlqs.js';

/**
 * The part of the `--rlqs` report that `--against` adds: the other revision's figures beside this
 * tree's, from the same rounds, and this tree's over the other's, to show that a change costs no
 * CPU against an earlier commit.
 */

const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (cells: string[]) => [row(cells), row(cells.map(() => '---'))];
const perThousand = (value: number | null) =>
  value === null || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(1)} ms`;
const times = (value: number | null) =>
  value === null || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(3)}×`;
const rate = (value: number) =>
  Number.isFinite(value) ? `${Math.round(value).toLocaleString('en-US')}/s` : 'n/a';

function sideRows(
  label: string,
  mine: RlqsSideSummary,
  theirs: RlqsSideSummary,
  change: RlqsChange,
): string[] {
  const settled =
    mine.settledServiceMsPer1000 === null
      ? []
      : [
          row([
            `${label}: tollgate CPU per 1,000 requests after the join`,
            perThousand(mine.settledServiceMsPer1000),
            perThousand(theirs.settledServiceMsPer1000),
            times(change.settledServiceMsPer1000),
          ]),
        ];
  return [
    row([
      `${label}: tollgate CPU per 1,000 requests`,
      perThousand(mine.serviceMsPer1000),
      perThousand(theirs.serviceMsPer1000),
      times(change.serviceMsPer1000),
    ]),
    ...settled,
    row([
      `${label}: Redis CPU per 1,000 requests`,
      perThousand(mine.redisMsPer1000),
      perThousand(theirs.redisMsPer1000),
      times(change.redisMsPer1000),
    ]),
    row([
      `${label}: client requests`,
      rate(mine.requestsPerSecond),
      rate(theirs.requestsPerSecond),
      times(ratioOf(mine.requestsPerSecond, theirs.requestsPerSecond)),
    ]),
  ];
}

/** A row of round-by-round ratios: their median, then each round's. */
const pairedRow = (label: string, paired: PairedRatios) =>
  row([label, times(paired.median), paired.ratios.map((each) => each.toFixed(3)).join(', ')]);

/** The other revision's runs, as the tree's are listed above. */
function runsTable(against: NonNullable<RlqsResults['against']>): string[] {
  const lines = header([
    'run',
    'seconds',
    'requests',
    'errors',
    'tollgate CPU s',
    'Redis CPU s',
    'tollgate CPU per 1,000',
    'reports',
    'assignments (changed)',
  ]);
  for (const run of against.runs) {
    lines.push(
      row([
        `${run.side} ${run.round}`,
        run.seconds.toFixed(1),
        run.requests.toLocaleString('en-US'),
        run.errors,
        run.serviceCpuSeconds.toFixed(2),
        run.redisCpuSeconds?.toFixed(2) ?? 'n/a',
        perThousand(run.serviceMsPer1000),
        run.reports?.toLocaleString('en-US') ?? '',
        run.assignments === undefined
          ? ''
          : `${run.assignments.toLocaleString('en-US')} (${run.assignmentsChanged ?? '?'})`,
      ]),
    );
  }
  const messages = against.runs.flatMap((run) =>
    (run.errorMessages ?? []).map((message) => `- ${run.side} ${run.round}: ${message}`),
  );
  if (messages.length > 0)
    lines.push('', 'Stream errors (the first of each run):', '', ...messages);
  return lines;
}

/** The section `--against` adds, to follow the report's own lines; none without it. */
export function rlqsAgainstSection(rlqs: RlqsResults): string[] {
  const { against } = rlqs;
  if (against === undefined) return [];
  const short = against.sha.slice(0, 12);
  const { treeOverAgainst: change } = against;
  return [
    `## This tree against ${against.ref} (${short})`,
    '',
    `\`${against.service.name}\` is tollgate at \`${against.ref}\`, commit ${against.sha}, built from that commit ` +
      "(bench/against.ts) and run beside this tree's tollgate in the same run: the same settings, Redis, rules " +
      'and load, each side of every round run on both, the first of the two changing every round. ' +
      `Only CACHE_KEY_PREFIX differs (\`${rlqs.service.settings.CACHE_KEY_PREFIX ?? '?'}\` and ` +
      `\`${against.service.settings.CACHE_KEY_PREFIX ?? '?'}\`), so that neither spends the other's counters ` +
      "or demand pools. The medians of the rounds; under 1× this tree's figure is the lower. " +
      'After the join leaves out the first 5 s of each RLQS run, while its fleet opens its streams ' +
      'and the shares settle: what a fleet that stays costs.',
    '',
    ...header([
      'figure',
      'this tree',
      `${against.ref} (${short})`,
      `this tree over ${against.ref}`,
    ]),
    ...sideRows('RLQS', rlqs.rlqs, against.rlqs, change.rlqs),
    ...sideRows('classic', rlqs.classic, against.classic, change.classic),
    row([
      'RLQS over classic, tollgate CPU',
      times(rlqs.ratio),
      times(against.ratio),
      times(ratioOf(rlqs.ratio, against.ratio)),
    ]),
    row([
      'tollgate CPU with no load, per second',
      perThousand(rlqs.idleMsPerSecond),
      perThousand(against.idleMsPerSecond),
      times(ratioOf(rlqs.idleMsPerSecond, against.idleMsPerSecond)),
    ]),
    '',
    `Round by round: each round's run on this tree over ${against.ref}'s run of the same side in that ` +
      'round, which saw the same load on the machine, and the median of those ratios.',
    '',
    ...header(['this tree over ' + against.ref, 'median', 'rounds, in order']),
    pairedRow('RLQS: tollgate CPU per 1,000 requests', against.roundByRound.rlqs),
    pairedRow('RLQS: the same after the join', against.roundByRound.settled),
    pairedRow('classic: tollgate CPU per 1,000 requests', against.roundByRound.classic),
    '',
    `${against.ref}'s runs:`,
    '',
    ...runsTable(against),
    '',
  ];
}
