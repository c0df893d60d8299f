import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';
import { describe, it } from 'node:test';
import { ENV_VARS, loadConfig } from '../../src/config.js';
import { repoRoot } from '../support/paths.js';
import {
  dockerfileRuntime,
  durationMs,
  environment,
  hostPathOf,
  kilnServices,
  mounts,
  ports,
  readYaml,
  type Service,
  services,
} from './compose-file.js';

const compose = readYaml('docker-compose.yml');
const all = services(compose);
const kiln = kilnServices(compose);
const runtime = dockerfileRuntime();

/** The configuration a Kiln container starts with: the image's ENV, then the service's environment. */
function kilnConfig(service: Service) {
  return loadConfig({ ...runtime.env, ...environment(service) });
}

function serviceByImage(prefix: string): [string, Service] {
  const found = [...all].filter(([, service]) => String(service.image).startsWith(prefix));
  assert.equal(found.length, 1, `one service runs ${prefix}`);
  return found[0]!;
}

describe('docker-compose.yml', () => {
  it('runs two Kiln servers built from the Dockerfile, every service with a named, tagged image', () => {
    assert.deepEqual([...kiln.keys()].sort(), ['kiln-1', 'kiln-2']);
    for (const [name, service] of all) {
      assert.equal(typeof service.image, 'string', `${name} names its image`);
      assert.match(service.image, /^[a-z0-9./_-]+:[A-Za-z0-9._-]+$/, `${name}: an image with a tag`);
      assert.notEqual(service.image.split(':')[1], 'latest', `${name}: a pinned tag`);
    }
  });

  it('gives the Kiln servers only variables Kiln reads, each valid', () => {
    for (const [name, service] of kiln) {
      for (const variable of Object.keys(environment(service))) {
        assert.ok(ENV_VARS.includes(variable), `${name}: Kiln does not read ${variable}`);
      }
      const config = kilnConfig(service); // throws a ConfigError naming a bad value
      assert.equal(config.host, '0.0.0.0', `${name} must listen beyond its own loopback`);
      assert.match(config.store, /^postgres:\/\//, `${name} uses the shared database`);
    }
  });

  it('points KILN_STORE at the PostgreSQL service, its user, password and database', () => {
    const [pgName, pg] = serviceByImage('postgres:');
    const pgEnv = environment(pg);
    for (const [name, service] of kiln) {
      const url = new URL(kilnConfig(service).store);
      assert.equal(url.hostname, pgName, name);
      assert.equal(url.port, '5432', name);
      assert.equal(url.username, pgEnv.POSTGRES_USER ?? 'postgres', name);
      assert.equal(decodeURIComponent(url.password), pgEnv.POSTGRES_PASSWORD, name);
      assert.equal(url.pathname, `/${pgEnv.POSTGRES_DB}`, name);
    }
  });

  it('publishes each Kiln server on the port its image exposes, on distinct host ports', () => {
    assert.equal(runtime.expose.length, 1, 'the Dockerfile exposes one port');
    for (const [name, service] of kiln) {
      const config = kilnConfig(service);
      assert.equal(config.port, runtime.expose[0], `${name} listens on the exposed port`);
      const published = ports(service);
      assert.equal(published.length, 1, name);
      assert.equal(published[0]!.target, config.port, `${name} publishes the port it listens on`);
      if (config.apiTokens.length === 0) {
        assert.equal(published[0]!.hostIp, '127.0.0.1', `${name} has an open API: publish it on the loopback only`);
      }
    }
    const hostPorts = [...all.values()].flatMap((service) => ports(service).map((port) => port.published));
    assert.ok(
      hostPorts.every((port) => port !== null),
      'every published port names its host port',
    );
    assert.equal(new Set(hostPorts).size, hostPorts.length, `host ports clash: ${hostPorts.join(', ')}`);
  });

  it('gives a Kiln server longer to stop than its drain', () => {
    for (const [name, service] of kiln) {
      assert.equal(typeof service.stop_grace_period, 'string', `${name} sets stop_grace_period`);
      const graceMs = kilnConfig(service).shutdownGraceMs;
      assert.ok(
        durationMs(service.stop_grace_period) >= graceMs + 5000,
        `${name}: stop_grace_period ${service.stop_grace_period} leaves no margin over KILN_SHUTDOWN_GRACE_MS ${graceMs}`,
      );
    }
  });

  it('mounts only paths of the repository, and named volumes it declares', () => {
    const declared = new Set(Object.keys(compose.volumes ?? {}));
    const used = new Set<string>();
    for (const [name, service] of all) {
      for (const mount of mounts(service)) {
        if (mount.kind === 'bind') {
          assert.ok(mount.source.startsWith('./'), `${name}: ${mount.source} is inside the repository`);
          assert.ok(existsSync(join(repoRoot, mount.source)), `${name}: ${mount.source} does not exist`);
        } else {
          assert.ok(declared.has(mount.source), `${name}: volume ${mount.source} is not declared`);
          used.add(mount.source);
        }
      }
    }
    assert.deepEqual([...declared].sort(), [...used].sort(), 'every declared volume is used');
  });

  it('depends only on services that exist, and waits for health only where there is a healthcheck', () => {
    for (const [name, service] of all) {
      const dependsOn = service.depends_on ?? [];
      const entries: [string, { condition?: string }][] = Array.isArray(dependsOn)
        ? dependsOn.map((dependency: string) => [dependency, {}])
        : Object.entries(dependsOn);
      for (const [dependency, { condition }] of entries) {
        assert.ok(all.has(dependency), `${name} depends on ${dependency}, which is not a service`);
        if (condition === 'service_healthy') {
          const healthcheck =
            all.get(dependency)!.healthcheck !== undefined || (kiln.has(dependency) && runtime.healthcheck);
          assert.ok(healthcheck, `${name} waits for ${dependency} to be healthy, which has no healthcheck`);
        }
      }
    }
    for (const [name, service] of kiln) {
      assert.equal(
        service.depends_on?.postgres?.condition,
        'service_healthy',
        `${name} starts once PostgreSQL is ready`,
      );
    }
  });

  it('runs PostgreSQL 16 with a 1 s autovacuum naptime, its data on a volume, ready only over TCP', () => {
    const [, pg] = serviceByImage('postgres:');
    assert.equal(pg.image, 'postgres:16');
    const command: string[] = Array.isArray(pg.command) ? pg.command : String(pg.command).split(/\s+/);
    assert.equal(command[0], 'postgres');
    assert.equal(command[command.indexOf('autovacuum_naptime=1s') - 1], '-c', 'autovacuum_naptime=1s is set');
    const data = mounts(pg).find((mount) => mount.target === '/var/lib/postgresql/data');
    assert.equal(data?.kind, 'volume', 'the data directory is a named volume');
    const test = [pg.healthcheck.test].flat().join(' ');
    // While the image runs initdb its server listens on the socket only; that must not count as ready.
    assert.match(test, /pg_isready .*-h 127\.0\.0\.1/);
  });

  it('gives Prometheus its configuration and rule files, and scrapes every Kiln server', () => {
    const [, prometheus] = serviceByImage('prom/prometheus:');
    const command: string[] = prometheus.command ?? [];
    const configPath =
      command.find((arg) => arg.startsWith('--config.file='))?.slice('--config.file='.length) ??
      '/etc/prometheus/prometheus.yml';
    assert.equal(hostPathOf(prometheus, configPath), 'deploy/prometheus/prometheus.yml');
    const config = readYaml('deploy/prometheus/prometheus.yml');
    for (const ruleFile of config.rule_files) {
      const inContainer = posix.resolve(posix.dirname(configPath), ruleFile);
      const host = hostPathOf(prometheus, inContainer);
      assert.ok(host !== null && existsSync(join(repoRoot, host)), `${inContainer} is mounted from the repository`);
    }
    const kilnJob = config.scrape_configs.find((job: any) => job.job_name === 'kiln');
    const targets = kilnJob.static_configs.flatMap((group: any) => group.targets);
    const expected = [...kiln].map(([name, service]) => `${name}:${kilnConfig(service).port}`);
    assert.deepEqual([...targets].sort(), expected.sort());
    assert.equal(kilnJob.metrics_path ?? '/metrics', '/metrics');
  });

  it('gives Grafana its provisioning and the dashboard, and a datasource that reaches Prometheus', () => {
    const [, grafana] = serviceByImage('grafana/grafana:');
    const [prometheusName, prometheus] = serviceByImage('prom/prometheus:');
    for (const kind of ['datasources', 'dashboards']) {
      const host = hostPathOf(grafana, `/etc/grafana/provisioning/${kind}`);
      assert.equal(host, `deploy/grafana/provisioning/${kind}`);
      assert.ok(statSync(join(repoRoot, host)).isDirectory());
    }

    const providers = readYaml('deploy/grafana/provisioning/dashboards/kiln.yml').providers;
    assert.equal(providers.length, 1);
    const dashboards = hostPathOf(grafana, providers[0].options.path);
    assert.equal(dashboards, 'deploy/grafana/dashboards');
    assert.ok(existsSync(join(repoRoot, dashboards, 'kiln.json')));
    const home = environment(grafana).GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH;
    if (home !== undefined) assert.equal(hostPathOf(grafana, home), 'deploy/grafana/dashboards/kiln.json');

    const [datasource, ...others] = readYaml('deploy/grafana/provisioning/datasources/prometheus.yml').datasources;
    assert.equal(others.length, 0);
    assert.equal(datasource.type, 'prometheus');
    const url = new URL(datasource.url);
    assert.equal(url.hostname, prometheusName);
    assert.ok(
      ports(prometheus).some((port) => port.target === Number(url.port)),
      `Prometheus listens on ${url.port} in its container`,
    );
    const config = readYaml('deploy/prometheus/prometheus.yml');
    assert.equal(datasource.jsonData.timeInterval, config.global.scrape_interval, 'Grafana knows the scrape interval');
  });
});

describe('compose durations', () => {
  it('reads the forms Compose writes', () => {
    assert.equal(durationMs('40s'), 40_000);
    assert.equal(durationMs('1m30s'), 90_000);
    assert.equal(durationMs('500ms'), 500);
    assert.throws(() => durationMs('40'));
    assert.throws(() => durationMs('40 s'));
  });
});
