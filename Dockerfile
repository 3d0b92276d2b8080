# deferflow's image: the compiled package (dist/), its runtime dependencies, and bin/deferflow.js
# as the entry point. tsx stays a dependency: it loads users' .ts DAG files and trigger modules.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY triggers ./triggers
COPY migrations ./migrations
RUN npm run build

FROM node:20-bookworm-slim
WORKDIR /app
# better-sqlite3 compiles its addon when no prebuilt binary can be fetched.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
# No scripts: `prepare` would build, which the build stage did; better-sqlite3's addon is built alone.
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm rebuild better-sqlite3
COPY bin ./bin
COPY --from=build /app/dist ./dist
ENTRYPOINT ["node", "bin/deferflow.js"]
