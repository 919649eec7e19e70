#!/usr/bin/env bash
# The classpath Curator 5.4 needs from Debian's jars (libcurator-recipes-java,
# libcurator-framework-java, zookeeper), with slf4j-nop to keep it quiet.
j=/usr/share/java
echo "$j/curator-recipes.jar:$j/curator-framework.jar:$j/curator-client.jar:$j/zookeeper.jar:$j/zookeeper-jute.jar:$j/guava.jar:$j/slf4j-api.jar:$j/slf4j-nop.jar:$j/netty-handler.jar:$j/netty-common.jar:$j/netty-buffer.jar:$j/netty-transport.jar:$j/netty-codec.jar:$j/netty-resolver.jar:$j/netty-transport-native-epoll.jar:$j/netty-transport-native-unix-common.jar"
