# tollgate's image: built in one stage, run from another that holds only the runtime dependencies.
# Both start from the same Node image, pinned by the digest of its multi-platform index, so that a
# rebuild gets the same bytes on amd64 and arm64. Its line is scripts/node-line.sh's IMAGE_LINE,
# the line `.ci/run` tests on; a bump changes the tag and the digest together, in both stages
# (Dependabot's docker updates do that).

FROM node:24.18.0-bookworm-slim@sha256:6f7b03f7c2c8e2e784dcf9295400527b9b1270fd37b7e9a7285cf83b6951452d AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/client/package.json ./packages/client/
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json LICENSE ./
COPY scripts/build.mjs ./scripts/
COPY packages/client ./packages/client
COPY proto ./proto
COPY src ./src
RUN node scripts/build.mjs

FROM node:24.18.0-bookworm-slim@sha256:6f7b03f7c2c8e2e784dcf9295400527b9b1270fd37b7e9a7285cf83b6951452d
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/client/package.json ./packages/client/
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
# The build carries its own copy of @tollgate/client (dist/vendor/client/).
COPY --from=build /app/dist ./dist
COPY lua ./lua
COPY proto ./proto
COPY config ./config
# Where Envoy Gateway's pod spec looks for envoyproxy/ratelimit's binary.
COPY --chmod=755 docker/ratelimit /bin/ratelimit
COPY docker/healthcheck.mjs ./docker/healthcheck.mjs
# The image's unprivileged user (uid 1000); nothing here needs root.
USER node
EXPOSE 8080 8081
# It reads PORT and HOST from the container's environment, as the service does.
HEALTHCHECK --interval=5s --timeout=2s --start-period=5s --retries=6 \
  CMD ["node", "docker/healthcheck.mjs"]
# node itself is PID 1, so SIGTERM reaches tollgate and it drains before exiting.
CMD ["node", "dist/main.js"]
