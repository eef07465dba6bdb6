# tollgate's image: built in one stage, run from another that holds only the runtime dependencies.

FROM node:20-bookworm-slim AS build
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

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/client/package.json ./packages/client/
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /app/dist ./dist
# The service imports @tollgate/client through its workspace link in node_modules.
COPY --from=build /app/packages/client/dist ./packages/client/dist
COPY --from=build /app/packages/client/esm ./packages/client/esm
COPY --from=build /app/packages/client/proto ./packages/client/proto
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
