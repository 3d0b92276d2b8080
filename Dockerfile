# deferflow's image: the sources, their dependencies, and bin/deferflow.js as the entry point
# (TypeScript runs through tsx, as everywhere else; there is no separate build step).
FROM node:20-bookworm-slim
WORKDIR /app
# better-sqlite3 compiles its addon when no prebuilt binary can be fetched.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY src ./src
COPY triggers ./triggers
COPY migrations ./migrations
COPY tsconfig.json ./
ENTRYPOINT ["node", "bin/deferflow.js"]
