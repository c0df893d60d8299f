# Kiln: docker build -t kiln . && docker run -p 3000:3000 -v kiln-data:/data kiln

# ── build: compile the TypeScript, then drop the dev dependencies ──
FROM node:24-bookworm-slim AS build

# better-sqlite3 13 is a Node-API module with its binaries in the package (glibc and musl,
# x64 and arm64): nothing is compiled or downloaded at install.
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

COPY tsconfig.json tsconfig.ui.json ./
COPY src ./src
RUN npm run build \
  && npm prune --omit=dev --no-audit --no-fund

# ── runtime: same Debian and Node as the build ──
FROM node:24-bookworm-slim AS runtime

ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    KILN_STORE=sqlite:/data/kiln.db

WORKDIR /app
# Root-owned and read-only for the service user; only /data is writable.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src

# The image's unprivileged `node` user (uid 1000) owns the data volume.
RUN mkdir -p /data && chown node:node /data
VOLUME /data
USER node

EXPOSE 3000
# Slim images have no curl: ask Node's own fetch.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# SIGTERM drains running attempts for KILN_SHUTDOWN_GRACE_MS (30 s by default):
# give `docker stop` more than that, e.g. `docker stop -t 40` or `--stop-timeout 40`.
STOPSIGNAL SIGTERM
CMD ["node", "dist/src/main.js"]
