import { readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { parse } from 'yaml';
import { repoRoot } from '../support/paths.js';

/** Reading docker-compose.yml and the Dockerfile the way Compose and Docker do, for the deploy tests. */

export type Service = Record<string, any>;

export interface Port {
  hostIp: string | null;
  published: number | null;
  target: number;
}

export interface Mount {
  kind: 'bind' | 'volume';
  source: string;
  target: string;
}

export function readYaml(path: string): any {
  // merge: docker-compose.yml shares the Kiln servers' settings with `<<: *kiln-server`.
  return parse(readFileSync(join(repoRoot, path), 'utf8'), { merge: true });
}

export function services(compose: any): Map<string, Service> {
  return new Map(Object.entries(compose.services as Record<string, Service>));
}

/** Services built from the repository's Dockerfile: the Kiln servers. */
export function kilnServices(compose: any): Map<string, Service> {
  return new Map(
    [...services(compose)].filter(([, service]) => {
      const build = typeof service.build === 'string' ? { context: service.build } : service.build;
      return (
        build !== undefined &&
        posix.normalize(build.context) === '.' &&
        (build.dockerfile ?? 'Dockerfile') === 'Dockerfile'
      );
    }),
  );
}

export function environment(service: Service): Record<string, string> {
  const env = service.environment ?? {};
  const pairs: [string, unknown][] = Array.isArray(env)
    ? env.map((entry: string) => {
        const at = entry.indexOf('=');
        return at < 0 ? [entry, undefined] : [entry.slice(0, at), entry.slice(at + 1)];
      })
    : Object.entries(env);
  for (const [name, value] of pairs) {
    // Compose would turn a YAML number or boolean into text; a string says what is meant.
    if (typeof value !== 'string') throw new Error(`environment ${name} is not a string: ${JSON.stringify(value)}`);
  }
  return Object.fromEntries(pairs) as Record<string, string>;
}

export function ports(service: Service): Port[] {
  return (service.ports ?? []).map((entry: unknown): Port => {
    if (typeof entry === 'object' && entry !== null) {
      const long = entry as { target: number; published?: number | string; host_ip?: string };
      return {
        hostIp: long.host_ip ?? null,
        published: long.published === undefined ? null : Number(long.published),
        target: Number(long.target),
      };
    }
    const parts = String(entry)
      .replace(/\/(tcp|udp)$/, '')
      .split(':');
    const target = Number(parts.pop());
    const published = parts.length > 0 ? Number(parts.pop()) : null;
    return { hostIp: parts.length > 0 ? parts.join(':') : null, published, target };
  });
}

export function mounts(service: Service): Mount[] {
  return (service.volumes ?? []).map((entry: unknown): Mount => {
    if (typeof entry === 'object' && entry !== null) {
      const long = entry as { type: string; source: string; target: string };
      return { kind: long.type === 'bind' ? 'bind' : 'volume', source: long.source, target: long.target };
    }
    const [source, target] = String(entry).split(':') as [string, string | undefined];
    if (target === undefined) throw new Error(`a volume without a target (an anonymous volume): ${String(entry)}`);
    return { kind: /^[./~]/.test(source) ? 'bind' : 'volume', source, target };
  });
}

/** The repository path (relative) of what a bind mount puts at containerPath, or null. */
export function hostPathOf(service: Service, containerPath: string): string | null {
  for (const mount of mounts(service)) {
    if (mount.kind !== 'bind') continue;
    if (containerPath === mount.target) return posix.normalize(mount.source);
    if (containerPath.startsWith(`${mount.target}/`)) {
      return posix.join(mount.source, containerPath.slice(mount.target.length + 1));
    }
  }
  return null;
}

/** A Compose duration ("40s", "1m30s", "500ms") in milliseconds. */
export function durationMs(text: string): number {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001 };
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|us|h|m|s)/g)];
  if (parts.length === 0 || parts.map((part) => part[0]).join('') !== text) throw new Error(`not a duration: ${text}`);
  return parts.reduce((sum, part) => sum + Number(part[1]) * units[part[2]!]!, 0);
}

export interface DockerStage {
  env: Record<string, string>;
  expose: number[];
  healthcheck: boolean;
}

/** The Dockerfile's last stage (the image that runs): its ENV, EXPOSE and HEALTHCHECK. */
export function dockerfileRuntime(): DockerStage {
  const lines = readFileSync(join(repoRoot, 'Dockerfile'), 'utf8')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  const lastFrom = lines.findLastIndex((line) => /^FROM\s/i.test(line));
  const stage: DockerStage = { env: {}, expose: [], healthcheck: false };
  for (const line of lines.slice(lastFrom + 1)) {
    const [instruction, rest] = [line.split(/\s+/, 1)[0]!.toUpperCase(), line.replace(/^\S+\s*/, '')];
    if (instruction === 'ENV') {
      for (const match of rest.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)) {
        stage.env[match[1]!] = match[2]!.replace(/^"(.*)"$/, '$1');
      }
    } else if (instruction === 'EXPOSE') {
      stage.expose.push(...rest.split(/\s+/).map((port) => Number(port.replace(/\/(tcp|udp)$/, ''))));
    } else if (instruction === 'HEALTHCHECK') {
      stage.healthcheck = !/^NONE$/i.test(rest);
    }
  }
  return stage;
}
