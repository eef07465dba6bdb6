# tollgate's image: built in one stage, run from another that holds only the runtime dependencies.

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY lua ./lua
COPY proto ./proto
COPY config ./config
# Where Envoy Gateway's pod spec looks for envoyproxy/ratelimit's binary.
COPY --chmod=755 docker/ratelimit /bin/ratelimit
COPY docker/healthcheck.mjs ./docker/healthcheck.mjs
# The image's unprivileged user; nothing here needs root.
USER node
EXPOSE 8080 8081
# It reads PORT and HOST from the container's environment, as the service does.
HEALTHCHECK --interval=5s --timeout=2s --start-period=5s --retries=6 \
  CMD ["node", "docker/healthcheck.mjs"]
# node itself is PID 1, so SIGTERM reaches tollgate and it drains before exiting.
CMD ["node", "dist/main.js"]
