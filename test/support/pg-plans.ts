import type pg from 'pg';

/** A value a test passes to a statement it explains: ids, names and numbers, and arrays of them. */
export type PlanParam = string | number | readonly (string | number)[];

/** Every node of a plan as EXPLAIN (FORMAT JSON) gives it. */
export function planNodes(explained: unknown): Record<string, unknown>[] {
  const nodes: Record<string, unknown>[] = [];
  const visit = (node: Record<string, unknown>) => {
    nodes.push(node);
    for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) visit(child);
  };
  for (const entry of explained as { Plan: Record<string, unknown> }[]) visit(entry.Plan);
  return nodes;
}

/** A value as a literal of an EXECUTE. */
export function literal(value: PlanParam): string {
  if (typeof value === 'number') return String(value);
  return `'${typeof value === 'string' ? value : `{${value.join(',')}}`}'`;
}

/**
 * The plan of `text` for `params`, in a transaction begun with `begin` and rolled back:
 * the custom plan PostgreSQL makes for these values, or (`generic`) the generic plan a
 * prepared statement may keep after its fifth run, planned without them.
 */
export async function explainPlan(
  db: pg.ClientBase,
  text: string,
  params: readonly PlanParam[],
  begin: string,
  generic: boolean,
): Promise<unknown> {
  await db.query(begin);
  try {
    if (!generic) {
      const plan = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${text}`, [...params]);
      return plan.rows[0]?.['QUERY PLAN'];
    }
    await db.query('SET LOCAL plan_cache_mode = force_generic_plan');
    await db.query(`PREPARE explained_plan AS ${text}`);
    const plan = await db.query<{ 'QUERY PLAN': unknown }>(
      `EXPLAIN (FORMAT JSON) EXECUTE explained_plan(${params.map(literal).join(', ')})`,
    );
    return plan.rows[0]?.['QUERY PLAN'];
  } finally {
    await db.query('ROLLBACK');
    await db.query('DEALLOCATE ALL');
  }
}

/**
 * From now on, every statement `db` runs (a function's own statements included) comes back
 * as a notice with its plan, as auto_explain logs it in JSON; `analyze` adds the actual
 * rows and the buffers read. `notices` holds each notice that carries a plan, in order,
 * until `stop()`.
 */
export async function recordPlans(
  db: pg.Client,
  { analyze = false }: { analyze?: boolean } = {},
): Promise<{ notices: string[]; stop(): void }> {
  await db.query(`LOAD 'auto_explain'`);
  const settings = ['log_min_duration = 0', 'log_nested_statements = on', 'log_format = json', 'log_level = notice'];
  if (analyze) settings.push('log_analyze = on', 'log_buffers = on');
  for (const setting of settings) await db.query(`SET auto_explain.${setting}`);
  const notices: string[] = [];
  const onNotice = (notice: { message?: string }) => {
    const text = notice.message ?? '';
    if (/"Plan"/.test(text)) notices.push(text);
  };
  db.on('notice', onNotice);
  return { notices, stop: () => db.off('notice', onNotice) };
}
